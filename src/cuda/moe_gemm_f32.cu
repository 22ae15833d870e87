// The expert-bank grouped GEMM with fp32 output (W2: the combine applies the
// routing weight in fp32 before the one bf16 rounding, as the reference).
#include "cuda/moe_gemm.cuh"

namespace magi2::cuda {

std::unique_ptr<ExpertGemm> make_expert_gemm_f32(const ExpertGemmShape& shape, const DeviceAlloc& alloc) {
  return std::make_unique<moe_gemm::Runner<float>>(shape, alloc);
}

}  // namespace magi2::cuda
