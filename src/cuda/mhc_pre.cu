// The mHC pre-mix (spec magi2-dit.md §9.3) as the opt-in fast kernel
// (fused_kernels.h mhc_pre_fused), alone or with its branch's pre-norm
// (MhcPreParams::norm: the RMSNorm that opens the attention branch, the dense
// MLP and the MoE, and with FP8 linears the e4m3 rows of its output).
//
// Bytes at 272p (29,872 tokens, D = 3072): the pre-mix reads the state (734
// MB) and writes the branch input a (183 MB), which the norm then read back
// and wrote again as y (+ 92 MB of FP8 rows). With the norm fused in, a stays
// in shared memory (one warp a token, d bf16 values each) and only y and its
// rows are written: one pass instead of two, and the norm's quantisation runs
// under the other warps' state reads. The bytes are those of the two ops
// (mhc_pre_vec_kernel's fp32 mix; rms_norm_row_shared is rms_norm's own body).
#include <cstdint>

#include "cuda/cuda_common.h"
#include "cuda/device_fp.cuh"
#include "cuda/fused_kernels.h"
#include "cuda/mma_split.cuh"
#include "cuda/row_norm.cuh"

namespace magi2::cuda {

namespace {

using namespace dev;

constexpr int kStreams = 4;
// A warp per token, 8 tokens per block; lane l owns columns 8 l + 256 i.
constexpr int kVecWarps = 8;
constexpr size_t kSharedLimit = 48 * 1024;  // without the opt-in attribute

// The pre-norm's operands (kNorm): w [groups * d] f32 and the rows' groups
// (cu), y [t, d] bf16 (row stride ldy), with kQ8 y8q [t, d] e4m3 and y8s
// [t, d / 128] f32 (contiguous).
struct PreNorm {
  const float* w = nullptr;
  int4 cu{};
  int groups = 1;
  float eps = 0.f;
  uint16_t* y = nullptr;
  int64_t ldy = 0;
  uint8_t* y8q = nullptr;
  float* y8s = nullptr;
};

// a (nullable with kNorm): the branch input [t, d] bf16, row stride lda.
// kNorm: the d bf16 values of each token also go to the warp's row of shared
// memory (d * 2 bytes a warp), from which the warp runs the pre-norm.
template <bool kNorm, bool kQ8>
__global__ void __launch_bounds__(kVecWarps * 32)
    mhc_pre_vec_kernel(const uint16_t* __restrict__ state, int64_t lds, const float* __restrict__ logits, int64_t ldl,
                       const float* __restrict__ alpha, const float* __restrict__ bias, float c,
                       uint16_t* __restrict__ a, int64_t lda, float* __restrict__ h_pre, int64_t ldh, int64_t d,
                       int64_t t, PreNorm nm) {
  extern __shared__ uint4 rows[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kVecWarps + warp;
  if (r >= t) return;  // warp-uniform
  float hv = 0.f;
  if (lane < kStreams) {
    const float ac = alpha[0] * c;
    hv = round_bf16(sigmoid_f32(ac * logits[r * ldl + lane] + bias[lane]));
    if (h_pre != nullptr) h_pre[r * ldh + lane] = hv;
  }
  float h[kStreams];
#pragma unroll
  for (int i = 0; i < kStreams; ++i) h[i] = __shfl_sync(0xffffffffu, hv, i);
  const uint16_t* s = state + r * lds;
  uint4* sx = rows + static_cast<int64_t>(warp) * (d / 8);
  for (int64_t col = 8 * lane; col < d; col += 256) {
    uint4 x[kStreams];
#pragma unroll
    for (int i = 0; i < kStreams; ++i) x[i] = __ldg(reinterpret_cast<const uint4*>(s + i * d + col));
    uint16_t out[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      float acc = 0.f;
#pragma unroll
      for (int i = 0; i < kStreams; ++i) acc += h[i] * bf16_at(x[i], j);
      out[j] = f32_to_bf16(acc);
    }
    const uint4 v = pack8(out);
    if (!kNorm || a != nullptr) *reinterpret_cast<uint4*>(a + r * lda + col) = v;
    if constexpr (kNorm) sx[col / 8] = v;
  }
  if constexpr (kNorm) {
    __syncwarp();
    const int dn = static_cast<int>(d);
    const float* wm = nm.w + static_cast<int64_t>(group_of(nm.cu, nm.groups, r)) * d;
    if constexpr (kQ8)
      rms_norm_row_shared<uint16_t, true>(sx, dn, lane, wm, nm.eps, nm.y + r * nm.ldy, nm.y8q + r * d,
                                          nm.y8s + r * (d / kFp8ActGroup));
    else
      rms_norm_row_shared<uint16_t>(sx, dn, lane, wm, nm.eps, nm.y + r * nm.ldy);
  }
}

template <bool kNorm, bool kQ8>
void launch_pre(const MhcPreParams& p, int64_t t, int64_t d, size_t shared, const PreNorm& nm, cudaStream_t s) {
  const Tensor& a = p.a;
  mhc_pre_vec_kernel<kNorm, kQ8><<<launch_blocks(t, kVecWarps, "mhc_pre (fused)"), kVecWarps * 32, shared, s>>>(
      static_cast<const uint16_t*>(p.state.data()), p.state.row_stride(), static_cast<const float*>(p.logits.data()),
      p.logits.row_stride(), static_cast<const float*>(p.w->alpha_pre.data()),
      static_cast<const float*>(p.w->bias_pre.data()), p.c, a.defined() ? static_cast<uint16_t*>(a.data()) : nullptr,
      a.defined() ? a.row_stride() : 0, p.h_pre.defined() ? static_cast<float*>(p.h_pre.data()) : nullptr,
      p.h_pre.defined() ? p.h_pre.row_stride() : 0, d, t, nm);
  MAGI2_CUDA_CHECK_LAUNCH("mhc_pre (fused)");
}

}  // namespace

bool mhc_pre_fused(const MhcPreParams& p, cudaStream_t s) {
  const int64_t t = p.state.size(0), d = p.state.size(1) / kStreams;
  if (d % 8 != 0 || !rows_aligned16(p.state) || (p.a.defined() && !rows_aligned16(p.a))) return false;
  if (!p.norm.y.defined()) {
    if (!p.a.defined()) return false;
    if (t > 0) launch_pre<false, false>(p, t, d, 0, {}, s);
    return true;
  }
  // With the pre-norm: rms_norm_row_kernel's conditions (bf16 rows, one head, 16-byte aligned gains), the
  // warps' rows within the default shared memory, and contiguous FP8 rows.
  const RmsNormParams& n = p.norm;
  const size_t shared = sizeof(uint16_t) * static_cast<size_t>(d) * kVecWarps;
  const bool q8 = n.y8.defined();
  if (n.heads != 1 || n.y.dtype() != DType::BF16 || !rows_aligned16(n.y) || shared > kSharedLimit ||
      reinterpret_cast<uintptr_t>(n.w.data()) % 16 != 0 ||
      (q8 && (d % kFp8ActGroup != 0 || !n.y8.q.is_contiguous() || !n.y8.scale.is_contiguous())))
    return false;
  if (t == 0) return true;
  PreNorm nm{.w = static_cast<const float*>(n.w.data()), .cu = cu_of(n.groups), .groups = n.groups.count,
             .eps = n.eps, .y = static_cast<uint16_t*>(n.y.data()), .ldy = n.y.row_stride()};
  if (q8) {
    nm.y8q = static_cast<uint8_t*>(n.y8.q.data());
    nm.y8s = static_cast<float*>(n.y8.scale.data());
    launch_pre<true, true>(p, t, d, shared, nm, s);
  } else {
    launch_pre<true, false>(p, t, d, shared, nm, s);
  }
  return true;
}

}  // namespace magi2::cuda
