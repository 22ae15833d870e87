// Causal grouped-query attention of the Qwen3.5 full-attention layers on the
// CUDA backend (CausalAttentionParams), step for step the CPU reference
// (src/cpu/causal_attention.cpp, torch's CPU flash-attention kernel): keys in
// blocks of 512 with a running max M, p = exp(s - M) in fp32 (glibc expf's
// bits), the block's fp32 row sum in key order, P V with p rounded to bf16 on
// the bf16 path (fp32 accumulation in key order), o = acc * (1 / sum). Scores
// are the dot_f32 order (16 partial sums, the halving tree) times the scale.
// Built with --fmad=false, so the bytes equal the CPU's.
//
// Correctness first, on the CUDA cores: one warp per (query, head); lanes
// score keys j = lane (mod 32) of a block, lane 0 sums the block's p in order,
// and lane l accumulates head dims l, l + 32, ... over the keys in order.
// Consecutive warps take consecutive queries of one head (K/V reuse in cache).
// The backend's causal_attention prefers cuDNN SDPA for bf16 (text_ops.h);
// this kernel is the fallback, the fp32 path and the bit-exact oracle.
#include <cstdint>

#include "cuda/cuda_common.h"
#include "cuda/device_fp.cuh"
#include "cuda/text_ops.h"
#include "ops/text_checks.h"

namespace magi2::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kKvBlock = 512;  // the CPU kernel's kv split
constexpr int kMaxDimsPerLane = 16;  // head dims up to 512

using dev::load_f32;
using dev::store_f32;

struct CausalArgs {
  const void *q, *k, *v;
  void* o;
  int64_t ldq, ldk, ldv, ldo;
  int64_t t, h, group, hd;
  float scale;
  bool bf;
};

template <typename T>
__global__ void __launch_bounds__(32 * kWarps) causal_attention_kernel(CausalArgs p) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (item >= p.t * p.h) return;  // whole warps leave; no block-wide sync below
  const int64_t qh = item / p.t, i = item % p.t, kvh = qh / p.group;
  float* qs = smem + warp * (p.hd + kKvBlock);
  float* z = qs + p.hd;
  const T* qrow = static_cast<const T*>(p.q) + i * p.ldq + qh * p.hd;
  const T* kb = static_cast<const T*>(p.k) + kvh * p.hd;
  const T* vb = static_cast<const T*>(p.v) + kvh * p.hd;
  for (int64_t d = lane; d < p.hd; d += 32) qs[d] = load_f32(qrow + d);
  __syncwarp();

  float acc[kMaxDimsPerLane];
#pragma unroll
  for (int u = 0; u < kMaxDimsPerLane; ++u) acc[u] = 0.f;
  float m = -INFINITY, sum = 0.f;
  for (int64_t j0 = 0; j0 <= i; j0 += kKvBlock) {
    const int n = static_cast<int>(i + 1 - j0 < kKvBlock ? i + 1 - j0 : kKvBlock);
    float bm = m;
    for (int j = lane; j < n; j += 32) {
      const float s = dev::dot16(qs, kb + (j0 + j) * p.ldk, p.hd) * p.scale;
      z[j] = s;
      bm = bm < s ? s : bm;
    }
    for (int off = 16; off >= 1; off /= 2) {
      const float o = __shfl_xor_sync(0xffffffffu, bm, off);
      bm = bm < o ? o : bm;
    }
    const float corr = dev::exp_f32(m - bm);  // 0 on the first block (m = -inf)
    __syncwarp();
    for (int j = lane; j < n; j += 32) z[j] = dev::exp_f32(z[j] - bm);
    __syncwarp();
    float bsum = 0.f;
    if (lane == 0)
      for (int j = 0; j < n; ++j) bsum += z[j];
    bsum = __shfl_sync(0xffffffffu, bsum, 0);
    sum = bsum + corr * sum;
#pragma unroll
    for (int u = 0; u < kMaxDimsPerLane; ++u) acc[u] *= corr;
    for (int j = 0; j < n; ++j) {
      const float pj = p.bf ? dev::round_bf16(z[j]) : z[j];
      const T* vj = vb + (j0 + j) * p.ldv;
#pragma unroll
      for (int u = 0; u < kMaxDimsPerLane; ++u) {
        const int64_t d = lane + 32 * u;
        if (d < p.hd) acc[u] += pj * load_f32(vj + d);
      }
    }
    m = bm;
    __syncwarp();  // z is rewritten by the next block
  }
  const float inv = 1.0f / sum;
  T* orow = static_cast<T*>(p.o) + i * p.ldo + qh * p.hd;
#pragma unroll
  for (int u = 0; u < kMaxDimsPerLane; ++u) {
    const int64_t d = lane + 32 * u;
    if (d < p.hd) store_f32(orow + d, acc[u] * inv);
  }
}

__global__ void causal_meta_kernel(int64_t t, int64_t q_elems, int64_t kv_elems, int32_t* seq, int64_t* off_q,
                                   int64_t* off_kv) {
  seq[0] = static_cast<int32_t>(t);
  off_q[0] = 0;
  off_q[1] = t * q_elems;
  off_kv[0] = 0;
  off_kv[1] = t * kv_elems;
}

}  // namespace

void causal_meta(int64_t t, int64_t q_elems, int64_t kv_elems, int32_t* seq, int64_t* off_q, int64_t* off_kv,
                 cudaStream_t s) {
  causal_meta_kernel<<<1, 1, 0, s>>>(t, q_elems, kv_elems, seq, off_q, off_kv);
  MAGI2_CUDA_CHECK_LAUNCH("causal_attention metadata");
}

void causal_attention(const CausalAttentionParams& p, cudaStream_t s, bool own_kernel_only) {
  const CausalAttentionDims d = check_causal_attention(p, Device::CUDA);
  if (d.t == 0 || d.hd == 0) return;
  const bool cudnn_shape = p.q.dtype() == DType::BF16 && p.q.is_contiguous() && p.k.is_contiguous() &&
                           p.v.is_contiguous() && p.o.is_contiguous() && d.hd % 8 == 0 && d.hd <= 256 &&
                           d.t <= (int64_t{1} << 30) / (d.h * d.hd);
  if (!own_kernel_only && cudnn_shape && causal_attention_cudnn(p, d.t, d.h, d.hkv, d.hd, s)) return;
  MAGI2_CHECK(d.hd <= 32 * kMaxDimsPerLane, "causal_attention: the CUDA kernel takes head dims up to ",
              32 * kMaxDimsPerLane, ", got ", d.hd);
  CausalArgs a;
  a.q = p.q.data(), a.k = p.k.data(), a.v = p.v.data(), a.o = p.o.data();
  a.ldq = p.q.row_stride(), a.ldk = p.k.row_stride(), a.ldv = p.v.row_stride(), a.ldo = p.o.row_stride();
  a.t = d.t, a.h = d.h, a.group = d.h / d.hkv, a.hd = d.hd, a.scale = p.scale;
  a.bf = p.q.dtype() == DType::BF16;
  const int64_t warps = d.t * d.h;
  const unsigned blocks = static_cast<unsigned>((warps + kWarps - 1) / kWarps);
  const size_t smem = sizeof(float) * kWarps * static_cast<size_t>(d.hd + kKvBlock);
  if (a.bf)
    causal_attention_kernel<uint16_t><<<blocks, 32 * kWarps, smem, s>>>(a);
  else
    causal_attention_kernel<float><<<blocks, 32 * kWarps, smem, s>>>(a);
  MAGI2_CUDA_CHECK_LAUNCH("causal_attention");
}

}  // namespace magi2::cuda
