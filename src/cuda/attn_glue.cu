// The attention glue on the CUDA backend, one kernel per side of the core
// (spec magi2-dit.md §6 steps 4-9): the producer (q/k RMSNorm + RoPE + the
// permutation into token order, v gathered) and the consumer (sink factor +
// output gate + the permutation back), plus the small kernel that turns
// cu_seqlens into cuDNN's per-sample lengths and ragged offsets on the device.
//
// Bytes: the producer does the fp32 operations of rms_norm_kernel
// (elementwise.cu) and rope_kernel (rope.cu) in the same order, so it equals
// the unfused CUDA path and the CPU reference bit for bit. One half-warp owns
// one (row, head) vector, and lane j sums the squares of elements i = j (mod
// 16) in ascending i, then the shuffle tree 8, 4, 2, 1 (the order of both
// backends). Two producer kernels (attn_qkv_variant.h): the default keeps a
// lane's 8 elements in registers (shared memory only transposes them for the
// sum); the general one, its oracle, works on the vector in shared memory.
// With FP8 attention (AttnQkvParams::fp8) the default is one kernel a (head,
// key tile) that writes only the attention's e4m3 operands (attn_qkv_fp8.cu);
// the older forms stay for measurements (attn_glue_variants.h): the register
// kernel with q as e4m3 and k, v quantised by attention_fp8.cu's kernel, and
// the two passes. All give the same bytes.
#include <cmath>
#include <cstdint>

#include "cuda/attention_flash.h"
#include "cuda/attn_ops.h"
#include "cuda/attn_glue_variants.h"
#include "cuda/attn_rows.cuh"
#include "cuda/cuda_common.h"
#include "cuda/device_fp.cuh"
#include "cuda/env_choice.h"
#include "cuda/fp8_quant.cuh"
#include "cuda/linear_fp8.h"
#include "ops/numerics.h"
#include "ops/op_checks.h"

namespace magi2::cuda {

namespace {

using dev::bf16_to_f32;
using dev::f32_to_bf16;
using dev::round_bf16;
using glue::kRegHd;
using glue::kRegStride;
using glue::load8;
using glue::store8;

constexpr int kThreads = 256;
constexpr int kVecs = kThreads / 16;  // (row, head) vectors per block

/// exp(lse - logaddexp(lse, sink)) with the CPU's operation sequence (glibc-exact exp; log1pf is CUDA's).
__device__ __forceinline__ float sink_factor(float lse, float sink) {
  const float hi = fmaxf(lse, sink), lo = fminf(lse, sink);
  return dev::exp_f32(lse - (hi + log1pf(dev::exp_f32(lo - hi))));
}

// blockIdx.y: 0 = q, 1 = k, 2 = v. hd % 8 == 0.
__global__ void __launch_bounds__(kThreads)
    attn_qkv_kernel(const uint16_t* __restrict__ qkv, int64_t ldx, const float* __restrict__ q_norm,
                    const float* __restrict__ k_norm, const float* __restrict__ table, int64_t ldt,
                    const int32_t* __restrict__ src_rows, uint16_t* __restrict__ q, uint16_t* __restrict__ k,
                    uint16_t* __restrict__ v, int64_t t, int h, int hd, int half, int4 cu, int groups, float eps,
                    bool vec) {
  extern __shared__ float buf[];
  const int part = blockIdx.y;
  const int64_t vid = static_cast<int64_t>(blockIdx.x) * kVecs + threadIdx.x / 16;
  const int lane = threadIdx.x & 15;
  if (vid >= t * h) return;  // whole half-warps leave together
  const int64_t n = vid / h;
  const int head = static_cast<int>(vid % h);
  int64_t s = src_rows[n];
  uint16_t* out = (part == 0 ? q : part == 1 ? k : v) + vid * hd;
  if (s < 0 || s >= t) {  // no host check on the device path: a bad source row gives zeros (as gather_rows)
    for (int c = lane * 8; c < hd; c += 128)
      for (int j = 0; j < 8; ++j) out[c + j] = 0;
    return;
  }
  const uint16_t* x = qkv + s * ldx + static_cast<int64_t>(part) * h * hd + static_cast<int64_t>(head) * hd;
  float f[8];
  if (part == 2) {
    for (int c = lane * 8; c < hd; c += 128) {
      load8(x + c, vec, f);
      store8(out + c, vec, f);
    }
    return;
  }
  float* xv = buf + (threadIdx.x / 16) * hd;
  const unsigned mask = (threadIdx.x & 16) ? 0xffff0000u : 0x0000ffffu;
  for (int c = lane * 8; c < hd; c += 128) {
    load8(x + c, vec, f);
#pragma unroll
    for (int j = 0; j < 8; ++j) xv[c + j] = f[j];
  }
  __syncwarp(mask);
  float acc = 0.f;
  for (int i = lane; i < hd; i += 16) acc += xv[i] * xv[i];
  for (int off = 8; off >= 1; off /= 2) acc += __shfl_down_sync(mask, acc, off, 16);
  acc = __shfl_sync(mask, acc, 0, 16);
  const float ms = acc * (1.0f / static_cast<float>(hd));
  const float rs = 1.0f / sqrtf(ms + eps);
  const int m = dev::group_of(cu, groups, s);
  const float* w = (part == 0 ? q_norm : k_norm) + static_cast<int64_t>(m) * hd;
  __syncwarp(mask);  // every lane has read xv for the sum
  for (int i = lane; i < hd; i += 16) xv[i] = (xv[i] * rs) * (w[i] + 1.0f);
  __syncwarp(mask);
  const float* sn = table + n * ldt;
  const float* cs = sn + half;
  for (int c = lane * 8; c < hd; c += 128) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int i = c + j;
      if (i < half) {
        const float a = xv[i] * cs[i];
        const float b = (-xv[i + half]) * sn[i];
        f[j] = a + b;
      } else if (i < 2 * half) {
        const int jj = i - half;
        const float cc = xv[i] * cs[jj];
        const float d = xv[jj] * sn[jj];
        f[j] = cc + d;
      } else {
        f[j] = xv[i];
      }
    }
    store8(out + c, vec, f);
  }
}

// The default producer for 16-byte aligned rows, head dim 128 and a rotary
// half that is a multiple of 8 (the DiT's 48): one half-warp per (token, head)
// does its q, k and v (one index read, three 16-byte loads in flight, one read
// of the sin/cos row for q and k), and each lane keeps its 8 elements
// (8 lane .. 8 lane + 7) in registers. Shared memory only transposes the raw
// values for the sum of squares (lane j reads i = j + 16 k: 16 consecutive
// words; the two half-warps of a warp sit 16 banks apart, so no conflicts);
// the gains and the table come as 16-byte loads; rope's partner element
// i +- half comes from lane +- half / 8 by one shuffle per element. The same
// fp32 operations as attn_qkv_kernel in the same order, so the same bytes
// (the steps in attn_rows.cuh).
// kQ8 (AttnQkvParams::fp8): q goes out as FP8 attention's e4m3 operand with its row scale (q8 [T, H, 128],
// sq [T, H]: the bytes attention_fp8_quantize makes of the bf16 q) instead of bf16.
template <bool kQ8>
__global__ void __launch_bounds__(kThreads)
    attn_qkv_reg_kernel(const uint16_t* __restrict__ qkv, int64_t ldx, const float* __restrict__ q_norm,
                        const float* __restrict__ k_norm, const float* __restrict__ table, int64_t ldt,
                        const int32_t* __restrict__ src_rows, uint16_t* __restrict__ q, uint16_t* __restrict__ k,
                        uint16_t* __restrict__ v, int64_t t, int h, int half, int4 cu, int groups, float eps,
                        uint8_t* __restrict__ q8, float* __restrict__ sq) {
  __shared__ __align__(16) float buf[kVecs * kRegStride];
  const int64_t vid = static_cast<int64_t>(blockIdx.x) * kVecs + threadIdx.x / 16;
  const int lane = threadIdx.x & 15;
  if (vid >= t * h) return;  // whole half-warps leave together
  const int64_t n = vid / h;
  const int head = static_cast<int>(vid % h);
  const int64_t s = src_rows[n];
  const int64_t o = vid * kRegHd + lane * 8;
  if (s < 0 || s >= t) {  // as attn_qkv_kernel: a bad source row gives zeros
    const uint4 z = make_uint4(0u, 0u, 0u, 0u);
    if constexpr (kQ8) {
      const float f0[8] = {};
      dev::fp8_quantize8_half(f0, q8 + vid * kRegHd + lane * 8, sq + vid, lane,
                              (threadIdx.x & 16) ? 0xffff0000u : 0x0000ffffu);
    } else {
      *reinterpret_cast<uint4*>(q + o) = z;
    }
    *reinterpret_cast<uint4*>(k + o) = z;
    *reinterpret_cast<uint4*>(v + o) = z;
    return;
  }
  const int64_t d = static_cast<int64_t>(h) * kRegHd;
  const uint16_t* x = qkv + s * ldx + static_cast<int64_t>(head) * kRegHd + lane * 8;
  const uint4 rq = *reinterpret_cast<const uint4*>(x), rk = *reinterpret_cast<const uint4*>(x + d);
  *reinterpret_cast<uint4*>(v + o) = *reinterpret_cast<const uint4*>(x + 2 * d);
  float fq[8], fk[8];
  const unsigned mask = (threadIdx.x & 16) ? 0xffff0000u : 0x0000ffffu;
  const int64_t wo = static_cast<int64_t>(dev::group_of(cu, groups, s)) * kRegHd + lane * 8;
  float* xq = buf + (threadIdx.x / 16) * kRegStride;
  glue::qk_norm_rope8(rq, rk, xq, xq + kRegHd, q_norm + wo, k_norm + wo, table + n * ldt, half, lane, mask, eps, fq,
                      fk);
  if constexpr (kQ8) {
#pragma unroll
    for (int j = 0; j < 8; ++j) fq[j] = round_bf16(fq[j]);  // the bf16 q attention_fp8_quantize would read
    dev::fp8_quantize8_half(fq, q8 + vid * kRegHd + lane * 8, sq + vid, lane, mask);
  } else {
    store8(q + o, true, fq);
  }
  store8(k + o, true, fk);
}

// One half-warp per (output row, head). src_rows, lse and g are optional
// (identity rows, no sink factor, no gate): the in-place sink correction of
// attention() is this kernel with out == o and no src_rows / g. kQ8
// (AttnOutParams::out8, hd == 128, vec): the half-warp's head is one 1 x 128
// group, quantised from the bf16 values stored (out8q [T, H*hd], out8s [T, H]).
template <bool kQ8 = false>
__global__ void __launch_bounds__(kThreads)
    attn_out_kernel(const uint16_t* o, const float* __restrict__ lse, const float* __restrict__ sinks,
                    const uint16_t* __restrict__ g, int64_t ldg, const int32_t* __restrict__ src_rows, uint16_t* out,
                    int64_t t, int h, int hd, bool vec, uint8_t* __restrict__ out8q = nullptr,
                    float* __restrict__ out8s = nullptr) {
  const int64_t vid = static_cast<int64_t>(blockIdx.x) * kVecs + threadIdx.x / 16;
  const int lane = threadIdx.x & 15;
  if (vid >= t * h) return;
  const int64_t n = vid / h;
  const int head = static_cast<int>(vid % h);
  const int64_t r = src_rows ? src_rows[n] : n;
  uint16_t* dst = out + vid * hd;
  float f[8];
  const unsigned half_mask = (threadIdx.x & 16) ? 0xffff0000u : 0x0000ffffu;
  if (r < 0 || r >= t) {
    for (int j = 0; j < 8; ++j) f[j] = 0.f;
    for (int c = lane * 8; c < hd; c += 128) store8(dst + c, false, f);
    if constexpr (kQ8) dev::fp8_quantize8_half(f, out8q + vid * hd + lane * 8, out8s + vid, lane, half_mask);
    return;
  }
  const float factor = lse ? sink_factor(lse[r * h + head], sinks[head]) : 1.0f;
  const float s = g ? round_bf16(dev::sigmoid_f32(bf16_to_f32(g[n * ldg + head]))) : 1.0f;
  const uint16_t* src = o + (r * h + head) * hd;
  for (int c = lane * 8; c < hd; c += 128) {
    load8(src + c, vec, f);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      float y = lse ? round_bf16(f[j] * factor) : f[j];
      if (g) y = y * s;
      f[j] = y;
    }
    store8(dst + c, vec, f);
    if constexpr (kQ8) {
#pragma unroll
      for (int j = 0; j < 8; ++j) f[j] = round_bf16(f[j]);
      dev::fp8_quantize8_half(f, out8q + vid * hd + c, out8s + vid, lane, half_mask);
    }
  }
}

// One warp per output row n: the row's h heads of o[src_rows[n]] (one
// contiguous run of h x hd) in 16-byte steps, several in flight a lane. Lane
// j < h computes head j's sink factor and gate once (the operations of
// attn_out_kernel); each step takes its head's pair by shuffle. Same bytes.
// kQ8 (AttnOutParams::out8, hd == 128): a head's 128 values are one 1 x 128
// group held by a half-warp (16 steps of 8), quantised from the bf16 values
// stored: out8q [T, H*hd] e4m3, out8s [T, H] f32.
template <bool kQ8 = false>
__global__ void __launch_bounds__(kThreads)
    attn_out_rows_kernel(const uint16_t* __restrict__ o, const float* __restrict__ lse,
                         const float* __restrict__ sinks, const uint16_t* __restrict__ g, int64_t ldg,
                         const int32_t* __restrict__ src_rows, uint16_t* __restrict__ out, int64_t t, int h, int hd,
                         uint8_t* __restrict__ out8q = nullptr, float* __restrict__ out8s = nullptr) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (n >= t) return;  // whole warps leave together
  const int64_t r = src_rows ? src_rows[n] : n;
  const int steps = h * hd / 8, per_head = hd / 8;
  uint4* dst = reinterpret_cast<uint4*>(out + n * h * hd);
  if (r < 0 || r >= t) {
    for (int c = lane; c < steps; c += 32) dst[c] = make_uint4(0u, 0u, 0u, 0u);
    if constexpr (kQ8) {  // zeros quantise to zeros with scale 1 (fp8_act_scale(0))
      for (int c = lane; c < steps; c += 32) reinterpret_cast<uint2*>(out8q + n * h * hd)[c] = make_uint2(0u, 0u);
      for (int j = lane; j < h; j += 32) out8s[n * h + j] = 1.0f;
    }
    return;
  }
  float factor = 1.0f, gs = 1.0f;
  if (lane < h) {
    if (lse) factor = sink_factor(lse[r * h + lane], sinks[lane]);
    if (g) gs = round_bf16(dev::sigmoid_f32(bf16_to_f32(g[n * ldg + lane])));
  }
  const uint4* src = reinterpret_cast<const uint4*>(o + r * h * hd);
  constexpr int kInFlight = 4;
  for (int c0 = 0; c0 < steps; c0 += 32 * kInFlight) {  // the same trip count in every lane (shuffles)
    uint4 v[kInFlight];
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) {
      const int c = c0 + 32 * i + lane;
      if (c < steps) v[i] = src[c];
    }
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) {
      const int c = c0 + 32 * i + lane;
      const int head = min(c, steps - 1) / per_head;
      const float fac = __shfl_sync(0xffffffffu, factor, head), s = __shfl_sync(0xffffffffu, gs, head);
      if (c < steps) {
        float f[8];
        load8(reinterpret_cast<const uint16_t*>(&v[i]), true, f);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          float y = lse ? round_bf16(f[j] * fac) : f[j];
          if (g) y = y * s;
          f[j] = y;
        }
        store8(reinterpret_cast<uint16_t*>(dst + c), true, f);
        if constexpr (kQ8) {
#pragma unroll
          for (int j = 0; j < 8; ++j) f[j] = round_bf16(f[j]);
          dev::fp8_quantize8_half(f, out8q + n * h * hd + 8 * c, out8s + n * h + c / 16, lane & 15,
                                  (lane & 16) ? 0xffff0000u : 0x0000ffffu);
        }
      }
    }
  }
}

__global__ void ragged_meta_kernel(const int32_t* __restrict__ cu, int64_t nseq, int64_t token_elems,
                                   int64_t stats_elems, int32_t* __restrict__ seq, int64_t* __restrict__ off_x,
                                   int64_t* __restrict__ off_s) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b > nseq) return;
  const int64_t c = cu[b];
  if (b < nseq) seq[b] = cu[b + 1] - cu[b];
  off_x[b] = c * token_elems;
  off_s[b] = c * stats_elems;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

unsigned vec_blocks(int64_t vecs) { return static_cast<unsigned>((vecs + kVecs - 1) / kVecs); }

void check_thd(const Tensor& x, const Shape& shape, const char* what) {
  MAGI2_CHECK(x.defined() && x.device() == Device::CUDA && x.dtype() == DType::BF16 && x.is_contiguous() &&
                  x.shape() == shape,
              what, ": expected contiguous bf16 ", shape_str(shape), " on the GPU, got ",
              x.defined() ? shape_str(x.shape()) : std::string("nothing"));
}

}  // namespace

void attn_qkv(const AttnQkvParams& p, cudaStream_t s) {
  if (!p.fp8) return attn_qkv_variant(p, s, AttnQkvKernel::kAuto);
  // MAGI2_ATTN_QKV_FP8 (a measurement knob, attn_glue_variants.h): tiles (default), q-in-producer or two-pass.
  const int form = env_choice("MAGI2_ATTN_QKV_FP8", {"tiles", "q-in-producer", "two-pass"});
  attn_qkv_fp8_variant(p, s,
                       form == 2   ? AttnQkvFp8Kernel::kTwoPass
                       : form == 1 ? AttnQkvFp8Kernel::kQInProducer
                                   : AttnQkvFp8Kernel::kTiles);
}

void attn_qkv_fp8_variant(const AttnQkvParams& p, cudaStream_t s, AttnQkvFp8Kernel which) {
  const AttnQkvShape a = check_attn_qkv(p);
  const Tensor& cs = p.cu_seqlens;
  MAGI2_CHECK(cs.defined() && cs.device() == Device::CUDA && cs.dtype() == DType::I32 && cs.dim() == 1 &&
                  cs.numel() >= 2 && cs.is_contiguous(),
              "attn_qkv.cu_seqlens: FP8 attention's operands need the attention call's cu_seqlens, i32 [nseq+1] "
              "on the GPU");
  MAGI2_CHECK(a.hd == kRegHd && a.half % 8 == 0 && aligned16(p.qkv.data()) && p.qkv.row_stride() % 8 == 0 &&
                  aligned16(p.k.data()) && aligned16(p.v.data()) && aligned16(p.table.data()) &&
                  p.table.row_stride() % 4 == 0 && aligned16(p.q_norm.data()) && aligned16(p.k_norm.data()),
              "CUDA backend: attn_qkv with FP8 attention needs head dim ", kRegHd,
              ", a rotary half that is a multiple of 8 and 16-byte aligned rows (got head dim ", a.hd,
              ", rotary half ", a.half, ")");
  MAGI2_CHECK(attention_flash_supported(kRegHd), "attn_qkv.fp8: FP8 attention needs the CUTLASS headers");
  const int64_t nseq = cs.numel() - 1;
  const FlashFp8Operands f = attention_fp8_operands(a.t, a.h, nseq, s);
  if (a.t == 0 || a.h == 0) return;
  AttentionParams ap;  // what attention_fp8_quantize reads of the attention call: q, k, v
  ap.q = p.q;
  ap.k = p.k;
  ap.v = p.v;
  AttentionShape as;
  as.t = a.t, as.h = a.h, as.hd = a.hd, as.nseq = nseq, as.cu = cs.data_as<int32_t>();
  if (which == AttnQkvFp8Kernel::kTiles) return attn_qkv_fp8_tiles(p, a.t, a.h, a.half, nseq, f, s);
  if (which == AttnQkvFp8Kernel::kTwoPass) {
    attn_qkv_variant(p, s, AttnQkvKernel::kAuto);
    return attention_fp8_quantize(ap, as, f, s);
  }
  const int4 cu = make_int4(static_cast<int>(p.groups.cu[0]), static_cast<int>(p.groups.cu[1]),
                            static_cast<int>(p.groups.cu[2]), static_cast<int>(p.groups.cu[3]));
  attn_qkv_reg_kernel<true><<<vec_blocks(a.t * a.h), kThreads, 0, s>>>(
      p.qkv.data_as<uint16_t>(), p.qkv.row_stride(), p.q_norm.data_as<float>(), p.k_norm.data_as<float>(),
      p.table.data_as<float>(), p.table.row_stride(), p.src_rows.data_as<int32_t>(), nullptr,
      p.k.data_as<uint16_t>(), p.v.data_as<uint16_t>(), a.t, static_cast<int>(a.h), static_cast<int>(a.half), cu,
      p.groups.count, p.eps, f.q, f.sq);
  MAGI2_CUDA_CHECK_LAUNCH("attn_qkv.fp8");
  attention_fp8_quantize(ap, as, f, s, /*with_q=*/false);
}

AttnQkvShape check_attn_qkv(const AttnQkvParams& p) {
  MAGI2_CHECK(p.q.defined() && p.q.dim() == 3, "attn_qkv.q: expected [T, H, hd]");
  const int64_t t = p.q.size(0), h = p.q.size(1), hd = p.q.size(2);
  check_thd(p.q, p.q.shape(), "attn_qkv.q");
  check_thd(p.k, p.q.shape(), "attn_qkv.k");
  check_thd(p.v, p.q.shape(), "attn_qkv.v");
  MAGI2_CHECK(hd % 8 == 0 && hd <= 256,
              "CUDA backend: attn_qkv needs a head dim that is a multiple of 8 up to 256, got ", hd);
  check_2d(p.qkv, t, 3 * h * hd, "attn_qkv.qkv");
  MAGI2_CHECK(p.qkv.dtype() == DType::BF16, "attn_qkv.qkv: expected bf16");
  check_groups(p.groups, t, "attn_qkv");
  for (const Tensor* w : {&p.q_norm, &p.k_norm})
    MAGI2_CHECK(w->defined() && w->device() == Device::CUDA && w->dtype() == DType::F32 &&
                    w->numel() == hd * p.groups.count,
                "attn_qkv: q_norm and k_norm must hold ", hd * p.groups.count, " f32 values on the GPU");
  MAGI2_CHECK(p.table.defined() && p.table.dim() == 2 && p.table.dtype() == DType::F32,
              "attn_qkv.table: expected f32 [T, 6*nb]");
  const int64_t half = p.table.size(1) / 2;
  check_2d(p.table, t, 2 * half, "attn_qkv.table");
  MAGI2_CHECK(2 * half <= hd, "attn_qkv: rotary dim ", 2 * half, " exceeds head dim ", hd);
  (void)check_index_on(Device::CUDA, p.src_rows, t, "attn_qkv.src_rows");
  return {t, h, hd, half};
}

void attn_qkv_variant(const AttnQkvParams& p, cudaStream_t s, AttnQkvKernel which) {
  const AttnQkvShape a = check_attn_qkv(p);
  const int64_t t = a.t, h = a.h, hd = a.hd, half = a.half;
  const int32_t* rows = p.src_rows.data_as<int32_t>();
  if (t == 0 || h == 0) return;
  const bool vec = aligned16(p.qkv.data()) && p.qkv.row_stride() % 8 == 0 && aligned16(p.q.data()) &&
                   aligned16(p.k.data()) && aligned16(p.v.data());
  const int4 cu = make_int4(static_cast<int>(p.groups.cu[0]), static_cast<int>(p.groups.cu[1]),
                            static_cast<int>(p.groups.cu[2]), static_cast<int>(p.groups.cu[3]));
  const bool reg_fits = vec && hd == kRegHd && half % 8 == 0 && p.table.row_stride() % 4 == 0 &&
                        aligned16(p.table.data()) && aligned16(p.q_norm.data()) && aligned16(p.k_norm.data());
  if (reg_fits && (which == AttnQkvKernel::kAuto || which == AttnQkvKernel::kRegisters)) {
    attn_qkv_reg_kernel<false><<<vec_blocks(t * h), kThreads, 0, s>>>(
        p.qkv.data_as<uint16_t>(), p.qkv.row_stride(), p.q_norm.data_as<float>(), p.k_norm.data_as<float>(),
        p.table.data_as<float>(), p.table.row_stride(), rows, p.q.data_as<uint16_t>(), p.k.data_as<uint16_t>(),
        p.v.data_as<uint16_t>(), t, static_cast<int>(h), static_cast<int>(half), cu, p.groups.count, p.eps, nullptr,
        nullptr);
    MAGI2_CUDA_CHECK_LAUNCH("attn_qkv");
    return;
  }
  const size_t smem = sizeof(float) * kVecs * hd;
  attn_qkv_kernel<<<dim3(vec_blocks(t * h), 3), kThreads, smem, s>>>(
      p.qkv.data_as<uint16_t>(), p.qkv.row_stride(), p.q_norm.data_as<float>(), p.k_norm.data_as<float>(),
      p.table.data_as<float>(), p.table.row_stride(), rows, p.q.data_as<uint16_t>(), p.k.data_as<uint16_t>(),
      p.v.data_as<uint16_t>(), t, static_cast<int>(h), static_cast<int>(hd), static_cast<int>(half), cu,
      p.groups.count, p.eps, vec);
  MAGI2_CUDA_CHECK_LAUNCH("attn_qkv");
}

namespace {
// out's FP8 rows in a second pass, where the one-pass kernel does not apply.
void quantize_out8(const AttnOutParams& p, cudaStream_t s) {
  quantize_fp8_rows_of(p.out.reshape({p.o.size(0), p.o.size(1) * p.o.size(2)}), p.out8, s, "attn_out.out8");
}
}  // namespace

void attn_out(const AttnOutParams& p, cudaStream_t s) { attn_out_variant(p, s, AttnOutKernel::kAuto); }

void attn_out_variant(const AttnOutParams& p, cudaStream_t s, AttnOutKernel which) {
  MAGI2_CHECK(p.o.defined() && p.o.dim() == 3, "attn_out.o: expected [T, H, hd]");
  const int64_t t = p.o.size(0), h = p.o.size(1), hd = p.o.size(2);
  check_thd(p.o, p.o.shape(), "attn_out.o");
  check_thd(p.out, p.o.shape(), "attn_out.out");
  MAGI2_CHECK(p.out.data() != p.o.data(), "attn_out.out must not alias o");
  MAGI2_CHECK(hd % 8 == 0, "CUDA backend: attn_out needs a head dim that is a multiple of 8, got ", hd);
  check_2d(p.g, t, h, "attn_out.g");
  MAGI2_CHECK(p.g.dtype() == DType::BF16, "attn_out.g: expected bf16");
  const int32_t* rows = check_index_on(Device::CUDA, p.src_rows, t, "attn_out.src_rows");
  const float* lse = nullptr;
  const float* sinks = nullptr;
  if (p.lse.defined()) {
    MAGI2_CHECK(p.lse.device() == Device::CUDA && p.lse.dtype() == DType::F32 && p.lse.is_contiguous() &&
                    p.lse.numel() == t * h,
                "attn_out.lse: expected contiguous f32 [", t, ", ", h, "] on the GPU");
    MAGI2_CHECK(p.sinks.defined() && p.sinks.device() == Device::CUDA && p.sinks.dtype() == DType::F32 &&
                    p.head_begin >= 0 && p.sinks.numel() >= p.head_begin + h,
                "attn_out.sinks: expected at least ", p.head_begin + h, " f32 values on the GPU");
    lse = p.lse.data_as<float>();
    sinks = p.sinks.data_as<float>() + p.head_begin;
  }
  const bool q8 = p.out8.defined();
  if (q8) check_fp8_rows(Device::CUDA, p.out8, t, h * hd, "attn_out.out8");
  if (t == 0 || h == 0) return;
  const bool vec = aligned16(p.o.data()) && aligned16(p.out.data());
  const bool one_pass = q8 && hd == kFp8ActGroup && p.out8.q.is_contiguous() && p.out8.scale.is_contiguous();
  // out's FP8 rows in the same pass, by the row kernel unless MAGI2_ATTN_OUT_FP8=half-warp (a measurement
  // knob; unset or rows: the row kernel; both measured alike in the 272p step, H100, sixteenth session).
  if (one_pass && which == AttnOutKernel::kAuto &&
      env_choice("MAGI2_ATTN_OUT_FP8", {"half-warp", "rows"}) == 0)
    which = AttnOutKernel::kHalfWarp;
  if (vec && h <= 32 && which != AttnOutKernel::kHalfWarp) {
    const unsigned blocks = static_cast<unsigned>((t + kThreads / 32 - 1) / (kThreads / 32));
    if (one_pass)  // one pass writes out and its FP8 rows
      attn_out_rows_kernel<true><<<blocks, kThreads, 0, s>>>(
          p.o.data_as<uint16_t>(), lse, sinks, p.g.data_as<uint16_t>(), p.g.row_stride(), rows,
          p.out.data_as<uint16_t>(), t, static_cast<int>(h), static_cast<int>(hd), p.out8.q.data_as<uint8_t>(),
          p.out8.scale.data_as<float>());
    else
      attn_out_rows_kernel<<<blocks, kThreads, 0, s>>>(p.o.data_as<uint16_t>(), lse, sinks, p.g.data_as<uint16_t>(),
                                                       p.g.row_stride(), rows, p.out.data_as<uint16_t>(), t,
                                                       static_cast<int>(h), static_cast<int>(hd));
    MAGI2_CUDA_CHECK_LAUNCH("attn_out");
    if (q8 && !one_pass) quantize_out8(p, s);
    return;
  }
  if (one_pass && vec) {
    attn_out_kernel<true><<<vec_blocks(t * h), kThreads, 0, s>>>(
        p.o.data_as<uint16_t>(), lse, sinks, p.g.data_as<uint16_t>(), p.g.row_stride(), rows,
        p.out.data_as<uint16_t>(), t, static_cast<int>(h), static_cast<int>(hd), vec, p.out8.q.data_as<uint8_t>(),
        p.out8.scale.data_as<float>());
    MAGI2_CUDA_CHECK_LAUNCH("attn_out");
    return;
  }
  attn_out_kernel<<<vec_blocks(t * h), kThreads, 0, s>>>(p.o.data_as<uint16_t>(), lse, sinks,
                                                         p.g.data_as<uint16_t>(), p.g.row_stride(), rows,
                                                         p.out.data_as<uint16_t>(), t, static_cast<int>(h),
                                                         static_cast<int>(hd), vec);
  MAGI2_CUDA_CHECK_LAUNCH("attn_out");
  if (q8) quantize_out8(p, s);
}

void sink_correct(const Tensor& o, const float* lse, const float* sinks, cudaStream_t s) {
  const int64_t t = o.size(0), h = o.size(1), hd = o.size(2);
  if (t == 0 || h == 0) return;
  attn_out_kernel<<<vec_blocks(t * h), kThreads, 0, s>>>(o.data_as<uint16_t>(), lse, sinks, nullptr, 0, nullptr,
                                                         o.data_as<uint16_t>(), t, static_cast<int>(h),
                                                         static_cast<int>(hd), aligned16(o.data()));
  MAGI2_CUDA_CHECK_LAUNCH("attention sink correction");
}

void ragged_meta(const int32_t* cu, int64_t nseq, int64_t token_elems, int64_t stats_elems, int32_t* seq,
                 int64_t* off_x, int64_t* off_s, cudaStream_t s) {
  ragged_meta_kernel<<<static_cast<unsigned>((nseq + 1 + 127) / 128), 128, 0, s>>>(cu, nseq, token_elems,
                                                                                  stats_elems, seq, off_x, off_s);
  MAGI2_CUDA_CHECK_LAUNCH("attention ragged offsets");
}

}  // namespace magi2::cuda
