// Varlen attention with a learned sink per head on the CUDA backend (spec
// magi2-dit.md §6 step 7, §6.1), rounding as src/cpu/attention.cpp and the
// official path: o_fa = bf16(softmax(s q k^T) v) with an fp32 softmax and fp32
// P V, lse its fp32 log-sum-exp, o = bf16(o_fa * exp(lse - logaddexp(lse, sink))).
//
// Flash-attention-style, correctness first (no tensor cores yet): one block
// of 256 threads per (64 queries, head, sample). Q, then each 64-key tile of K
// and V, are widened to fp32 in shared memory; every thread owns 4 query rows
// x 4 key columns of the score tile and 4 rows x hd/16 columns of the output
// accumulator. The softmax is online (running max and sum per row, the
// accumulator rescaled per tile), so nothing of size T x T is stored. Row
// maxima and sums meet through a fixed shuffle tree and keys are visited in
// ascending tiles: the bytes do not depend on the launch or on other samples
// (no atomics). Dot products use explicit FMA (more accurate than the
// unfused fp32 ops the file is built with); the result is not bit-identical
// to the CPU's (other exp, other summation order): docs/cuda.md has the bound.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cuda/attn_ops.h"
#include "cuda/cuda_common.h"
#include "cuda/device_fp.cuh"

namespace magi2::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kBlockQ = 64;  // queries per block
constexpr int kBlockK = 64;  // keys per tile

template <int HD>
constexpr size_t smem_bytes() {
  // Q and K rows padded by one float so that column walks hit distinct banks.
  return sizeof(float) * (kBlockQ * (HD + 1) + kBlockK * (HD + 1) + kBlockK * HD + kBlockQ * (kBlockK + 1));
}

// Loads rows [r0, r0 + 64) of one head (hd = HD bf16 values each, 4-byte
// aligned) into fp32 shared memory with leading dimension ld; rows at or past
// `len` become zeros.
template <int HD>
__device__ __forceinline__ void load_tile(const uint16_t* __restrict__ g, int64_t row_stride, int r0, int len,
                                          float* __restrict__ dst, int ld) {
  constexpr int kPairs = HD / 2;
  for (int e = threadIdx.x; e < 64 * kPairs; e += kThreads) {
    const int r = e / kPairs, c = (e % kPairs) * 2;
    uint32_t w = 0;
    if (r0 + r < len) w = *reinterpret_cast<const uint32_t*>(g + static_cast<int64_t>(r0 + r) * row_stride + c);
    dst[r * ld + c] = __uint_as_float(w << 16);
    dst[r * ld + c + 1] = __uint_as_float(w & 0xffff0000u);
  }
}

template <int HD>
__global__ void __launch_bounds__(kThreads)
    attention_kernel(const uint16_t* __restrict__ q, const uint16_t* __restrict__ k, const uint16_t* __restrict__ v,
                     uint16_t* __restrict__ o, const float* __restrict__ sinks, const int32_t* __restrict__ cu,
                     int heads, float scale, float* __restrict__ lse_out) {
  constexpr int kLdq = HD + 1, kLdk = HD + 1, kLdp = kBlockK + 1, kDims = HD / 16;
  extern __shared__ float smem[];
  float* qs = smem;
  float* ks = qs + kBlockQ * kLdq;
  float* vs = ks + kBlockK * kLdk;
  float* ps = vs + kBlockK * HD;

  const int b = blockIdx.z, head = blockIdx.y;
  const int s0 = cu[b], len = cu[b + 1] - s0;
  const int q0 = blockIdx.x * kBlockQ;
  if (q0 >= len) return;
  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  const int64_t rs = static_cast<int64_t>(heads) * HD;  // elements per token
  const int64_t base = static_cast<int64_t>(s0) * rs + static_cast<int64_t>(head) * HD;

  load_tile<HD>(q + base, rs, q0, len, qs, kLdq);

  float m[4], l[4], acc[4][kDims];
  for (int i = 0; i < 4; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.f;
    for (int c = 0; c < kDims; ++c) acc[i][c] = 0.f;
  }

  for (int k0 = 0; k0 < len; k0 += kBlockK) {
    __syncthreads();  // the previous tile's K, V and P are consumed
    load_tile<HD>(k + base, rs, k0, len, ks, kLdk);
    load_tile<HD>(v + base, rs, k0, len, vs, HD);
    __syncthreads();

    float sc[4][4] = {};
    for (int d = 0; d < HD; ++d) {
      float qv[4], kv[4];
      for (int i = 0; i < 4; ++i) qv[i] = qs[(ty * 4 + i) * kLdq + d];
      for (int j = 0; j < 4; ++j) kv[j] = ks[(tx + 16 * j) * kLdk + d];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) sc[i][j] = __fmaf_rn(qv[i], kv[j], sc[i][j]);
    }

    for (int i = 0; i < 4; ++i) {
      float mx = -INFINITY;
      for (int j = 0; j < 4; ++j) {
        sc[i][j] = k0 + tx + 16 * j < len ? sc[i][j] * scale : -INFINITY;
        mx = fmaxf(mx, sc[i][j]);
      }
      // The 16 threads of a row are one half-warp: xor offsets below 16 stay inside it.
      for (int off = 8; off >= 1; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      const float m_new = fmaxf(m[i], mx);  // finite: every tile holds a valid key
      const float alpha = expf(m[i] - m_new);
      float sum = 0.f;
      for (int j = 0; j < 4; ++j) {
        const float pij = expf(sc[i][j] - m_new);
        ps[(ty * 4 + i) * kLdp + tx + 16 * j] = pij;
        sum += pij;
      }
      for (int off = 8; off >= 1; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
      l[i] = l[i] * alpha + sum;
      m[i] = m_new;
      for (int c = 0; c < kDims; ++c) acc[i][c] *= alpha;
    }
    __syncthreads();

    for (int j = 0; j < kBlockK; ++j) {
      float pv[4], vv[kDims];
      for (int i = 0; i < 4; ++i) pv[i] = ps[(ty * 4 + i) * kLdp + j];
      for (int c = 0; c < kDims; ++c) vv[c] = vs[j * HD + tx + 16 * c];
      for (int i = 0; i < 4; ++i)
        for (int c = 0; c < kDims; ++c) acc[i][c] = __fmaf_rn(pv[i], vv[c], acc[i][c]);
    }
  }

  const float sink = lse_out ? 0.f : sinks[head];
  for (int i = 0; i < 4; ++i) {
    const int r = q0 + ty * 4 + i;
    if (r >= len) continue;
    const float lse = m[i] + logf(l[i]);
    if (lse_out) {  // deferred sink (attn_out applies it): the plain FA output and its lse
      uint16_t* orow = o + base + static_cast<int64_t>(r) * rs;
      for (int c = 0; c < kDims; ++c) orow[tx + 16 * c] = dev::f32_to_bf16(acc[i][c] / l[i]);
      if (tx == 0) lse_out[static_cast<int64_t>(s0 + r) * heads + head] = lse;
      continue;
    }
    const float hi = fmaxf(lse, sink), lo = fminf(lse, sink);
    const float factor = expf(lse - (hi + log1pf(expf(lo - hi))));
    uint16_t* orow = o + base + static_cast<int64_t>(r) * rs;
    for (int c = 0; c < kDims; ++c) orow[tx + 16 * c] = dev::f32_to_bf16(dev::round_bf16(acc[i][c] / l[i]) * factor);
  }
}

template <int HD>
void launch(const AttentionParams& p, const int32_t* d_cu, int64_t nseq, int64_t max_len, cudaStream_t s) {
  static const bool configured = [] {
    MAGI2_CUDA_CHECK(cudaFuncSetAttribute(attention_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem_bytes<HD>())));
    return true;
  }();
  (void)configured;
  const dim3 grid(static_cast<unsigned>((max_len + kBlockQ - 1) / kBlockQ), static_cast<unsigned>(p.q.size(1)),
                  static_cast<unsigned>(nseq));
  attention_kernel<HD><<<grid, kThreads, smem_bytes<HD>(), s>>>(
      p.q.data_as<uint16_t>(), p.k.data_as<uint16_t>(), p.v.data_as<uint16_t>(), p.o.data_as<uint16_t>(),
      p.lse.defined() ? nullptr : p.sinks.data_as<float>() + p.head_begin, d_cu, static_cast<int>(p.q.size(1)),
      p.scale, p.lse.defined() ? p.lse.data_as<float>() : nullptr);
  MAGI2_CUDA_CHECK_LAUNCH("attention");
}

}  // namespace

AttentionShape check_attention(const AttentionParams& p) {
  MAGI2_CHECK(p.cu_seqlens.defined() && p.cu_seqlens.numel() >= 2, "attention: cu_seqlens is missing");
  AttentionShape a;
  a.cu = check_index_on(Device::CUDA, p.cu_seqlens, p.cu_seqlens.numel(), "attention.cu_seqlens");
  for (const Tensor* x : {&p.q, &p.k, &p.v, &p.o})
    MAGI2_CHECK(x->defined() && x->device() == Device::CUDA && x->dim() == 3 && x->is_contiguous() &&
                    x->dtype() == DType::BF16 && x->shape() == p.q.shape() &&
                    reinterpret_cast<uintptr_t>(x->data()) % 16 == 0,
                "attention: q, k, v, o must be contiguous, 16-byte aligned bf16 CUDA tensors of one shape [T, H, hd], "
                "got ",
                shape_str(x->shape()));
  a.t = p.q.size(0);
  a.h = p.q.size(1);
  a.hd = p.q.size(2);
  a.nseq = p.cu_seqlens.numel() - 1;
  MAGI2_CHECK(p.max_seqlen >= 0 && p.max_seqlen <= a.t, "attention: max_seqlen ", p.max_seqlen, " outside [0, ", a.t,
              "]");
  a.max_len = p.max_seqlen > 0 ? p.max_seqlen : a.t;
  if (p.lse.defined()) {
    MAGI2_CHECK(p.lse.device() == Device::CUDA && p.lse.dtype() == DType::F32 && p.lse.is_contiguous() &&
                    p.lse.numel() == a.t * a.h,
                "attention.lse: expected contiguous f32 [", a.t, ", ", a.h, "] on the GPU, got ",
                shape_str(p.lse.shape()));
  } else {
    MAGI2_CHECK(p.sinks.defined() && p.sinks.device() == Device::CUDA && p.sinks.dtype() == DType::F32 &&
                    p.sinks.numel() >= p.head_begin + a.h && p.head_begin >= 0,
                "attention.sinks: expected at least ", p.head_begin + a.h, " f32 values on the GPU");
  }
  return a;
}

void attention_fp32(const AttentionParams& p, cudaStream_t s) {
  const AttentionShape a = check_attention(p);
  MAGI2_CHECK(a.hd == 64 || a.hd == 128, "CUDA backend: attention is implemented for head dim 64 and 128, got ",
              a.hd);
  MAGI2_CHECK(a.nseq <= 65535 && a.h <= 65535, "attention: more than 65535 samples or heads");
  if (a.t == 0 || a.h == 0 || a.max_len == 0) return;
  if (a.hd == 64)
    launch<64>(p, a.cu, a.nseq, a.max_len, s);
  else
    launch<128>(p, a.cu, a.nseq, a.max_len, s);
}

}  // namespace magi2::cuda
