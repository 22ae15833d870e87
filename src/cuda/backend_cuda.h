// The CUDA backend's entry points. This header compiles without the CUDA
// headers, so model code and tools can include it in any build.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "ops/ops.h"

namespace magi2 {

/// The CUDA backend on GPU `device` (docs/cuda.md). Every op is enqueued on one
/// CUDA stream owned by the backend and returns without waiting for the GPU,
/// except `copy` into host memory. Tensors from `alloc` live on the device
/// (Device::CUDA) and are never dereferenced on the host; their memory returns
/// to the backend's cache when the last view is dropped. Ops that are not
/// implemented yet throw Error("CUDA backend: <op> is not implemented yet").
/// Errors: Error when the device cannot be opened or no GPU is present.
std::unique_ptr<Backend> make_cuda_backend(int device = 0);

/// Number of usable CUDA GPUs; 0 when there is no driver or no GPU (never throws).
int cuda_device_count();

/// Free and total memory of GPU `device` in bytes (cudaMemGetInfo; creates the
/// context if none exists). False when there is no such GPU (never throws).
bool cuda_memory_info(int device, size_t* free_bytes, size_t* total_bytes);

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

}  // namespace magi2
