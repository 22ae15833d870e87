// Choosing the backend that runs the DiT and its denoising loop (`--device`).
#pragma once

#include <memory>
#include <string>

#include "ops/backend_options.h"
#include "ops/copy_queue.h"
#include "ops/ops.h"

namespace magi2 {

/// Whether this build has the CUDA backend and a GPU is visible (never throws).
bool cuda_available();

/// The backend `device` resolves to, "cpu" or "cuda", without making it:
/// "auto" is cuda when cuda_available(). Errors: an unknown name, or "cuda"
/// without a usable GPU unless `planning_only` (a memory plan for a GPU may
/// be made anywhere).
std::string backend_name_for(const std::string& device, bool planning_only = false);

/// The backend named by `device`: "cpu" (the reference backend with `threads`
/// OpenMP threads, 0 = all), "cuda" (GPU 0, with `cuda`'s kernel choices) or
/// "auto" (cuda when cuda_available(), else cpu). Errors: an unknown name, an
/// unknown CudaOptions value, or "cuda" in a build without CUDA or on a
/// machine without a GPU (one line saying which).
std::unique_ptr<Backend> make_backend_for(const std::string& device, int threads, const CudaOptions& cuda = {});

/// A host -> device copy queue with `fences` fences beside `be`'s compute
/// (`--offload layerwise`, DitOffload): the CUDA backend's (cuda/copy_queue.h),
/// null for the CPU backend, which computes from host memory and streams nothing.
std::unique_ptr<CopyQueue> copy_queue_for(Backend& be, int fences = 2);

}  // namespace magi2
