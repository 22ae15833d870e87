// The FP8 linears' blockwise-scaled GEMM (bf16 output, K-major weight scales):
// one CUTLASS instantiation per file (each takes minutes to compile).
#include "cuda/moe_fp8_gemm.cuh"

namespace magi2::cuda {

std::unique_ptr<Fp8ExpertGemm> make_fp8_linear_gemm_bf16(const ExpertGemmShape& shape, const DeviceAlloc& alloc) {
  return std::make_unique<moe_fp8_gemm::Runner<cutlass::bfloat16_t, cute::GMMA::Major::K>>(shape, alloc);
}

}  // namespace magi2::cuda
