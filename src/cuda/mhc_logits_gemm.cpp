// The mHC logits as one cuBLASLt GEMM per weight group (fused_kernels.h
// mhc_logits_gemm; spec magi2-dit.md §9.2). Why: the fused logits kernel
// (mhc_fused.cu) runs the three bf16 split terms of each fp32 weight on
// mma.sync at ~0.55 of copy bandwidth; as a GEMM of 72 output columns
// cuBLASLt streams the state at ~0.9 of copy (bench_moe, H100). The GEMM
// cannot form the RMSNorm's sum of squares, so this path runs only where the
// post + residual that wrote the state handed it over (MhcLogitsParams::ss).
#include <cstdint>

#include "cuda/cuda_common.h"
#include "cuda/fused_kernels.h"
#include "cuda/linear.h"

namespace magi2::cuda {

bool mhc_logits_gemm(const MhcLogitsParams& p, const FusedPaths& fast, cudaStream_t s) {
  const int64_t t = p.state.size(0), vw = p.state.size(1);
  constexpr int64_t kCols = 72;  // 24 logits x 3 split terms
  if (vw % 8 != 0 || p.state.row_stride() % 8 != 0 || reinterpret_cast<uintptr_t>(p.state.data()) % 16 != 0)
    return false;
  if (t == 0) return true;
  const int groups = p.groups.count;
  const size_t w_bytes = (static_cast<size_t>(groups) * kCols * vw * 2 + 255) / 256 * 256;
  auto* buf = static_cast<char*>(fast.scratch->get(w_bytes + static_cast<size_t>(t) * kCols * 4, s,
                                                   "mhc_logits (GEMM)"));
  auto* w72 = reinterpret_cast<uint16_t*>(buf);
  auto* y72 = reinterpret_cast<float*>(buf + w_bytes);
  mhc_split72(static_cast<const float*>(p.phi.data()), static_cast<const float*>(p.norm_w.data()), vw, groups, w72, s);
  const Tensor w = Tensor::view_of(w72, {groups * kCols, vw}, DType::BF16, nullptr, Device::CUDA);
  const Tensor y = Tensor::view_of(y72, {t, kCols}, DType::F32, nullptr, Device::CUDA);
  fast.linear->run_f32_out(p.state, w, y, p.groups, s);
  mhc_logits_from_split72(y72, static_cast<const float*>(p.ss.data()), vw, p.eps, static_cast<float*>(p.logits.data()),
                          p.logits.row_stride(), t, s);
  return true;
}

}  // namespace magi2::cuda
