// FP8 attention's operands straight from the qkv projection (AttnQkvParams::fp8,
// the default form, AttnQkvFp8Kernel::kTiles): one CTA per (head, 128-token key
// tile) runs attn_qkv's q/k RMSNorm + RoPE + permutation into token order and
// the quantiser's rule (attention_fp8.cu) in one pass, so k and v never go to
// global memory as bf16. The two-kernel form wrote k and v as bf16 (366 MB a
// layer at 272p) and read them back to find each tile's scale; here the tile's
// bf16 k and raw v wait in shared memory for the block's amax instead.
//
// Bytes: q as attn_qkv_reg_kernel<true> (a row scale, from the bf16-rounded q);
// k = bf16(norm + rope) and v as attn_qkv writes them, each quantised with the
// scale of its tile (fp8_act_scale of the tile's amax) by fp8_quant4; V^T as
// attention_fp8_quantize_kernel lays it out (store_vt_tile). The bf16 values'
// amax is an integer max of their magnitudes' bits: the same value as
// fp8_amax_step's for every input without NaN. So every byte and scale equals
// attn_qkv + attention_fp8_quantize (test_cuda_attn_cudnn's
// AttnQkvFp8MatchesTheTwoPassPath, every form).
//
// CTA: 16 warps = 32 half-warps; half-warp j takes the tile's rows j, j + 32,
// j + 64, j + 96, one (token, head) vector a row, 8 elements a lane (the
// register kernel's layout, attn_rows.cuh). Shared memory: the tile's bf16 k
// and v (32 KB each), the half-warps' sums (34 KB; then V's e4m3 rows for the
// transpose): ~98 KB, two CTAs an SM.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/error.h"
#include "cuda/attention_flash.h"
#include "cuda/attention_tiles.cuh"
#include "cuda/attn_rows.cuh"
#include "cuda/cuda_common.h"
#include "cuda/device_fp.cuh"
#include "cuda/fp8_quant.cuh"
#include "ops/numerics.h"

namespace magi2::cuda {

namespace {

using glue::kRegHd;
using glue::kRegStride;

constexpr int kWarps = 16;
constexpr int kHalves = 2 * kWarps;
constexpr int kRows = kAttnTile / kHalves;  // rows a half-warp
constexpr int kVtStride = kRegHd + 4;       // bytes per e4m3 key row: 33 words, so the transpose's reads spread
constexpr int kTileBytes = kAttnTile * kRegHd * 2;     // one bf16 tile of k or v
constexpr int kSumBytes = kHalves * kRegStride * 4;    // the half-warps' sums
constexpr int kSmemBytes = 2 * kTileBytes + kSumBytes;  // 100,352
static_assert(kAttnTile * kVtStride <= kSumBytes, "V's e4m3 rows reuse the sums' shared memory");
static_assert(kAttnTile % kHalves == 0, "whole rows a half-warp");

/// The largest magnitude bits of a word's two bf16 values folded into m (per 16-bit half).
__device__ __forceinline__ uint32_t amax2(uint32_t m, uint32_t w) { return __vmaxu2(m, w & 0x7fff7fffu); }
__device__ __forceinline__ uint32_t amax8(uint32_t m, uint4 w) {
  return amax2(amax2(amax2(amax2(m, w.x), w.y), w.z), w.w);
}

/// A lane's 8 bf16 values (one 16-byte word) -> their 8 e4m3 bytes with (scale, rcp).
__device__ __forceinline__ uint2 quant8(uint4 w, float scale, float rcp) {
  float x[8];
  glue::load8(reinterpret_cast<const uint16_t*>(&w), true, x);
  return make_uint2(dev::fp8_quant4(x, scale, rcp), dev::fp8_quant4(x + 4, scale, rcp));
}

/// The tile's amax of a lane's folded pairs m over the block (red: kWarps words), as fp32.
__device__ __forceinline__ float block_amax(uint32_t m, uint32_t* red) {
  m = max(m & 0xffffu, m >> 16);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x / 32] = m;
  __syncthreads();
  m = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) m = max(m, red[w]);
  return __uint_as_float(m << 16);
}

// Grid (H, tiles): blockIdx.x the head, so the CTAs in flight read neighbouring
// heads of the same qkv rows. Tiles past the last sample's leave at once.
__global__ void __launch_bounds__(kWarps * 32, 2)
    attn_qkv_fp8_tile_kernel(const uint16_t* __restrict__ qkv, int64_t ldx, const float* __restrict__ q_norm,
                             const float* __restrict__ k_norm, const float* __restrict__ table, int64_t ldt,
                             const int32_t* __restrict__ src_rows, int64_t t, int h, int half, int4 gcu, int groups,
                             float eps, const int32_t* __restrict__ cu, int nseq, FlashFp8Operands f) {
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ uint32_t red[2][kWarps];
  AttnTile tl;
  const int tile = static_cast<int>(blockIdx.y);
  if (!attn_tile(tile, cu, nseq, tl)) return;
  const int head = static_cast<int>(blockIdx.x);
  const int hw = static_cast<int>(threadIdx.x) / 16, lane = static_cast<int>(threadIdx.x) & 15;
  const unsigned mask = (threadIdx.x & 16) ? 0xffff0000u : 0x0000ffffu;
  const int rows = static_cast<int>(tl.end - tl.q0 < kAttnTile ? tl.end - tl.q0 : kAttnTile);
  auto* ks = reinterpret_cast<uint4*>(smem);               // [kAttnTile][kRegHd / 8]: bf16 k
  auto* vs = reinterpret_cast<uint4*>(smem + kTileBytes);  // the same for v (zeros past the sample's end)
  auto* sums = reinterpret_cast<float*>(smem + 2 * kTileBytes);
  float* xq = sums + hw * kRegStride;
  const int64_t d = static_cast<int64_t>(h) * kRegHd;
  uint32_t mk = 0, mv = 0;  // magnitude bits, two bf16 halves a word
#pragma unroll 1
  for (int i = 0; i < kRows; ++i) {
    const int r = hw + i * kHalves;
    uint4 kw = make_uint4(0u, 0u, 0u, 0u), vw = kw;
    if (r < rows) {  // uniform in the half-warp
      const int64_t n = tl.q0 + r, vid = n * h + head;
      const int64_t s = src_rows[n];
      if (s < 0 || s >= t) {  // as attn_qkv: a bad source row gives zeros (q: zeros with scale 1)
        const float f0[8] = {};
        dev::fp8_quantize8_half(f0, f.q + vid * kRegHd + lane * 8, f.sq + vid, lane, mask);
      } else {
        const uint16_t* x = qkv + s * ldx + static_cast<int64_t>(head) * kRegHd + lane * 8;
        const uint4 rq = *reinterpret_cast<const uint4*>(x), rk = *reinterpret_cast<const uint4*>(x + d);
        vw = *reinterpret_cast<const uint4*>(x + 2 * d);
        const int64_t wo = static_cast<int64_t>(dev::group_of(gcu, groups, s)) * kRegHd + lane * 8;
        float fq[8], fk[8];
        __syncwarp(mask);  // the half-warp's previous row is out of its sums
        glue::qk_norm_rope8(rq, rk, xq, xq + kRegHd, q_norm + wo, k_norm + wo, table + n * ldt, half, lane, mask, eps,
                            fq, fk);
#pragma unroll
        for (int j = 0; j < 8; ++j) fq[j] = dev::round_bf16(fq[j]);  // the bf16 q the quantiser would read
        dev::fp8_quantize8_half(fq, f.q + vid * kRegHd + lane * 8, f.sq + vid, lane, mask);
        uint32_t kb[4];  // k as attn_qkv stores it
#pragma unroll
        for (int j = 0; j < 4; ++j)
          kb[j] = static_cast<uint32_t>(dev::f32_to_bf16(fk[2 * j])) |
                  static_cast<uint32_t>(dev::f32_to_bf16(fk[2 * j + 1])) << 16;
        kw = make_uint4(kb[0], kb[1], kb[2], kb[3]);
      }
    }
    ks[r * (kRegHd / 8) + lane] = kw;
    vs[r * (kRegHd / 8) + lane] = vw;
    mk = amax8(mk, kw);
    mv = amax8(mv, vw);
  }
  // The tile's scales (block_amax's barriers also end the sums' use).
  const float sk = fp8_act_scale(block_amax(mk, red[0])), sv = fp8_act_scale(block_amax(mv, red[1]));
  const float rk = fp8_act_rcp(sk), rv = fp8_act_rcp(sv);
  if (threadIdx.x == 0) {
    f.sk[static_cast<int64_t>(tile) * h + head] = sk;
    f.sv[static_cast<int64_t>(tile) * h + head] = sv;
  }
  uint8_t* v8 = smem + 2 * kTileBytes;  // [kAttnTile][kVtStride] e4m3
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int r = hw + i * kHalves;
    if (r < rows)
      *reinterpret_cast<uint2*>(f.k + ((tl.q0 + r) * h + head) * kRegHd + lane * 8) =
          quant8(ks[r * (kRegHd / 8) + lane], sk, rk);
    const uint2 q = quant8(vs[r * (kRegHd / 8) + lane], sv, rv);
    auto* row = reinterpret_cast<uint32_t*>(v8 + r * kVtStride + lane * 8);  // 4-byte aligned
    row[0] = q.x;
    row[1] = q.y;
  }
  __syncthreads();
  store_vt_tile(v8, kVtStride, f.vt + static_cast<int64_t>(head) * kRegHd * f.vt_cols +
                                   static_cast<int64_t>(tile) * kAttnTile,
                f.vt_cols, static_cast<int>(threadIdx.x) / 32, kWarps, static_cast<int>(threadIdx.x) & 31);
}

}  // namespace

void attn_qkv_fp8_tiles(const AttnQkvParams& p, int64_t t, int64_t h, int64_t half, int64_t nseq,
                        const FlashFp8Operands& f, cudaStream_t s) {
  const int64_t tiles = attn_tiles_bound(t, nseq);
  MAGI2_CHECK(tiles <= 65535 && h <= 65535, "attn_qkv.fp8: at most 65,535 key tiles and heads a call, got ", tiles,
              " tiles and ", h, " heads");
  if (t == 0 || h == 0) return;
  static const bool opted_in = [] {  // not a stream operation: fine during graph capture
    MAGI2_CUDA_CHECK(
        cudaFuncSetAttribute(attn_qkv_fp8_tile_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    return true;
  }();
  (void)opted_in;
  const int4 gcu = make_int4(static_cast<int>(p.groups.cu[0]), static_cast<int>(p.groups.cu[1]),
                             static_cast<int>(p.groups.cu[2]), static_cast<int>(p.groups.cu[3]));
  attn_qkv_fp8_tile_kernel<<<dim3(static_cast<unsigned>(h), static_cast<unsigned>(tiles)), kWarps * 32, kSmemBytes,
                             s>>>(p.qkv.data_as<uint16_t>(), p.qkv.row_stride(), p.q_norm.data_as<float>(),
                                  p.k_norm.data_as<float>(), p.table.data_as<float>(), p.table.row_stride(),
                                  p.src_rows.data_as<int32_t>(), t, static_cast<int>(h), static_cast<int>(half), gcu,
                                  p.groups.count, p.eps, p.cu_seqlens.data_as<int32_t>(), static_cast<int>(nseq), f);
  MAGI2_CUDA_CHECK_LAUNCH("attn_qkv.fp8 (tiles)");
}

}  // namespace magi2::cuda
