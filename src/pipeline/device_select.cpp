#include "pipeline/device_select.h"

#include "core/error.h"
#if defined(MAGI2_HAVE_CUDA)
#include "cuda/backend_cuda.h"
#include "cuda/copy_queue.h"
#endif

namespace magi2 {

bool cuda_available() {
#if defined(MAGI2_HAVE_CUDA)
  return cuda_device_count() > 0;
#else
  return false;
#endif
}

std::string backend_name_for(const std::string& device, bool planning_only) {
  MAGI2_CHECK(device == "auto" || device == "cpu" || device == "cuda", "--device must be auto, cpu or cuda, got '",
              device, "'");
  if (device == "cpu" || (device == "auto" && !cuda_available())) return "cpu";
#if defined(MAGI2_HAVE_CUDA)
  MAGI2_CHECK(planning_only || cuda_device_count() > 0,
              "--device cuda: no CUDA GPU is visible (driver missing or no device)");
#else
  MAGI2_CHECK(planning_only, "--device cuda: this build has no CUDA backend (configure with -DMAGI2_CUDA=ON and nvcc)");
#endif
  return "cuda";
}

std::unique_ptr<Backend> make_backend_for(const std::string& device, int threads, const CudaOptions& cuda) {
  validate(cuda);
  if (backend_name_for(device) == "cpu") return make_cpu_backend(threads);
#if defined(MAGI2_HAVE_CUDA)
  return make_cuda_backend(0, cuda);
#else
  throw Error("unreachable: backend_name_for refuses cuda in this build");
#endif
}

std::unique_ptr<CopyQueue> copy_queue_for(Backend& be, int fences) {
#if defined(MAGI2_HAVE_CUDA)
  if (be.device() == Device::CUDA) return cuda_copy_queue(be, fences);
#endif
  return nullptr;
}

}  // namespace magi2
