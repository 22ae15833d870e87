// The W8A8 expert-bank grouped GEMM with fp32 output (W2), one CUTLASS
// instantiation per file (each takes minutes to compile).
#include "cuda/moe_fp8_gemm.cuh"

namespace magi2::cuda {

std::unique_ptr<Fp8ExpertGemm> make_fp8_expert_gemm_f32(const ExpertGemmShape& shape, const DeviceAlloc& alloc) {
  return std::make_unique<moe_fp8_gemm::Runner<float>>(shape, alloc);
}

}  // namespace magi2::cuda
