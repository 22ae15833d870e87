// The expert-bank grouped GEMM with the SwiGLU7 epilogue (W13's gate half:
// D = bf16(swiglu7(bf16(A B), up))), one CUTLASS instantiation per file (each
// takes minutes to compile).
#include "cuda/moe_gemm.cuh"

namespace magi2::cuda {

std::unique_ptr<ExpertGemm> make_expert_gemm_swiglu7(const ExpertGemmShape& shape, const DeviceAlloc& alloc) {
  return std::make_unique<moe_gemm::Runner<cutlass::bfloat16_t, moe_gemm::EpilogueKind::kSwiglu7>>(shape, alloc);
}

}  // namespace magi2::cuda
