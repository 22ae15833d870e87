// The CUDA backend's entry points. This header compiles without the CUDA
// headers, so model code and tools can include it in any build.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "ops/backend_options.h"
#include "ops/ops.h"

namespace magi2 {

/// The CUDA backend on GPU `device` (docs/cuda.md). Every op is enqueued on one
/// CUDA stream owned by the backend and returns without waiting for the GPU,
/// except `copy` into host memory. Tensors from `alloc` live on the device
/// (Device::CUDA) and are never dereferenced on the host; their memory returns
/// to the backend's cache when the last view is dropped. Every op of ops.h is
/// implemented (block_sparse_attention included). `options` picks kernels (CudaOptions). Errors: Error when the device cannot
/// be opened or no GPU is present, or an unknown option value.
std::unique_ptr<Backend> make_cuda_backend(int device = 0, const CudaOptions& options = {});

/// Number of usable CUDA GPUs; 0 when there is no driver or no GPU (never throws).
int cuda_device_count();

/// Free and total memory of GPU `device` in bytes (cudaMemGetInfo; creates the
/// context if none exists). False when there is no such GPU (never throws).
bool cuda_memory_info(int device, size_t* free_bytes, size_t* total_bytes);

/// Holds all of the current GPU's free memory but `budget` bytes (one plain
/// cudaMalloc of free - budget, freed when the returned handle goes), so that
/// what runs next can allocate at most `budget` more bytes: how `magi2 bench
/// --max-device-memory` measures a smaller GPU on a large one. Returns an empty
/// handle when free <= budget. Error when the reservation cannot be made.
std::shared_ptr<void> cuda_hold_all_but(size_t budget);

/// The backend's CUDA stream as an opaque `cudaStream_t` (for events and
/// timing in tests and benchmarks). Error unless `b` is a CUDA backend.
void* cuda_stream_of(Backend& b);

/// Median milliseconds of `f` over `reps` timed runs after `warmup` untimed
/// ones (the mean of the middle two for an even `reps`). `f` enqueues its work
/// on `stream` (an opaque `cudaStream_t`, e.g. from cuda_stream_of); each run is
/// bracketed by CUDA events on that stream and waited for. Benchmarks and perf
/// lines only. Errors: Error on a CUDA failure or `reps` < 1.
double cuda_median_ms(void* stream, const std::function<void()>& f, int reps = 20, int warmup = 3);

/// Starts timing the regions of Backend::mark on a CUDA backend (eager runs
/// only: do not capture while profiling). Error unless `b` is a CUDA backend.
void cuda_profile_begin(Backend& b);
/// Stops timing; waits for the device and returns milliseconds per region
/// name, summed over every stretch between a mark and the next (or the end).
std::map<std::string, double> cuda_profile_end(Backend& b);

/// Waits until every op enqueued on the backend's stream has finished (tests
/// and benchmarks; the pipeline itself waits only in host-bound copies).
void cuda_synchronize(Backend& b);

/// Device memory of a CUDA backend, bytes: its caching allocator's blocks in
/// use now and at most so far, the cached free blocks, and the whole GPU's
/// used/total memory from the driver (every process and library included).
struct CudaMemoryStats {
  size_t in_use = 0, peak_in_use = 0, cached = 0, device_used = 0, device_total = 0;
};
/// Error unless `b` is a CUDA backend.
CudaMemoryStats cuda_memory_stats(Backend& b);
/// Starts a new peak: CudaMemoryStats::peak_in_use becomes the bytes in use
/// now, so a bench reports the peak of each phase rather than of the run.
/// Error unless `b` is a CUDA backend.
void cuda_reset_memory_peak(Backend& b);

/// conv3d through cuDNN on the CUDA backend `b` whatever MAGI2_CONV_KERNEL
/// says (cuda/conv_runner.h): false when cuDNN does not apply to p (nothing
/// is run then). For the op table and benchmarks; Error on another backend.
bool cuda_conv3d_cudnn(Backend& b, const Conv3dParams& p);
/// conv3d through our kernel (conv3d.cu: the CPU's summation order, bit-exact)
/// on the CUDA backend `b` whatever MAGI2_CONV_KERNEL says. Error on another backend.
void cuda_conv3d_own(Backend& b, const Conv3dParams& p);

/// Fills a contiguous device tensor with seeded pseudo-random values, on the
/// backend's stream (benchmarks: release-size weights made on the GPU without a
/// host copy). Element i depends only on (seed, i) (a splitmix64 hash). F32 and
/// BF16: uniform with mean 0 and standard deviation `stddev`; F8E4M3: the codes
/// e4m3(448 u) with u uniform in [-1, 1) (the block scales give the spread).
/// Error for other dtypes or a non-CUDA backend/tensor. random_fill.cu.
void cuda_fill_random(Backend& b, const Tensor& t, uint64_t seed, float stddev);

}  // namespace magi2
