// The CUDA CopyQueue (ops/copy_queue.h): a second non-blocking stream for
// host -> device weight copies, ordered against the backend's compute stream
// with events. This header compiles without the CUDA headers (like
// backend_cuda.h), so the engine and tools can include it in any build.
#pragma once

#include <memory>

#include "ops/copy_queue.h"
#include "ops/ops.h"

namespace magi2 {

/// A copy queue beside the stream of CUDA backend `b` with `fences` >= 1
/// fences (`--offload layerwise`, DitOffload). Error unless `b` is a CUDA
/// backend, or naming the CUDA call that failed.
std::unique_ptr<CopyQueue> cuda_copy_queue(Backend& b, int fences);

namespace cuda {
/// The implementation: GPU `device`, compute stream `compute` (an opaque `cudaStream_t`).
std::unique_ptr<CopyQueue> make_copy_queue(int device, void* compute, int fences);
}  // namespace cuda

}  // namespace magi2
