// The expert-bank grouped GEMM with the row-scale epilogue (W2 times the
// routing weight, bf16 out), one CUTLASS instantiation per file (each takes
// minutes to compile).
#include "cuda/moe_gemm.cuh"

namespace magi2::cuda {

std::unique_ptr<ExpertGemm> make_expert_gemm_row_scale(const ExpertGemmShape& shape, const DeviceAlloc& alloc) {
  MAGI2_CHECK(shape.parts == 1, "expert GEMM with the row-scale epilogue: one bank, got ", shape.parts);
  return std::make_unique<moe_gemm::Runner<cutlass::bfloat16_t, moe_gemm::EpilogueKind::kRowScale>>(shape, alloc);
}

}  // namespace magi2::cuda
