// FP8 attention's operands (attention_flash.h, AttentionParams::fp8): one
// kernel quantises q, k and v of a call into e4m3 with the scales of
// kFp8AttnTile's comment (ops/numerics.h), using the shared numerics
// (fp8_amax_step, fp8_act_scale, and fp8_act_quant's bytes by fp8_quant.cuh's
// multiplying form), so the scales and bytes are the CPU reference's
// (cpu/attention_fp8.cpp). Memory-bound: it reads the
// three bf16 tensors once (0.65 ms a layer at 272p on an H100, 0.42 of copy).
// Under the DiT (AttnQkvParams::fp8) q comes quantised from attn_qkv and this
// kernel takes k and v only.
//
// CTA: one 128-token tile of one sample (attention_tiles.cuh) and one head,
// 16 warps; a warp takes a token row as 32 lanes x 4 values. Q: one scale per
// row (a warp reduction). K and V: one scale per tile (the rows' amax, then a
// block reduction). V goes through shared memory to its transposed layout:
// row d of tile i in V^T holds the tile's keys in the order of P's e4m3
// registers in the flash kernel (fp8_vt_key); keys past the sample's end are 0.
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "core/error.h"
#include "cuda/attention_flash.h"
#include "cuda/attention_tiles.cuh"
#include "cuda/cuda_common.h"
#include "cuda/device_fp.cuh"
#include "cuda/fp8_quant.cuh"
#include "ops/fp8_attention_layout.h"
#include "ops/numerics.h"

namespace magi2::cuda {

namespace {

constexpr int kHD = 128;
constexpr int kWarps = 16;  // 8 rows a warp: ~64 registers, so two CTAs (32 warps) fit an SM
constexpr int kRowsPerWarp = kAttnTile / kWarps;
constexpr int kVtStride = kHD + 4;  // bytes per key row in shared memory: 33 words, so columns spread over banks

// The 8 bytes (four bf16 values, dims 4 lane .. 4 lane + 3) of (token, head) that lane `lane` handles.
__device__ __forceinline__ uint2 load4(const uint16_t* __restrict__ x, int64_t token, int h, int head, int lane) {
  return *reinterpret_cast<const uint2*>(x + (token * h + head) * kHD + 4 * lane);
}

__device__ __forceinline__ void unpack4(uint2 w, float* v) {
  v[0] = dev::bf16_to_f32(static_cast<uint16_t>(w.x & 0xffffu));
  v[1] = dev::bf16_to_f32(static_cast<uint16_t>(w.x >> 16));
  v[2] = dev::bf16_to_f32(static_cast<uint16_t>(w.y & 0xffffu));
  v[3] = dev::bf16_to_f32(static_cast<uint16_t>(w.y >> 16));
}

__device__ __forceinline__ float amax4(const float* v) {
  return fp8_amax_step(fp8_amax_step(fp8_amax_step(fp8_amax_step(0.f, v[0]), v[1]), v[2]), v[3]);
}

// The tile's amax over the rows this warp holds (raw[i] for i < mine), reduced
// over the block; red: kWarps floats of shared memory.
__device__ __forceinline__ float tile_amax(const uint2 (&raw)[kRowsPerWarp], int mine, float* red) {
  float a = 0.f;
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i)
    if (i < mine) {
      float x[4];
      unpack4(raw[i], x);
      for (int e = 0; e < 4; ++e) a = fp8_amax_step(a, x[e]);
    }
  a = dev::fp8_warp_amax(a);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  __syncthreads();  // red may still be read from the previous reduction
  if (lane == 0) red[warp] = a;
  __syncthreads();
  a = 0.f;
  for (int w = 0; w < kWarps; ++w) a = fp8_amax_step(a, red[w]);
  return a;
}

// Warp w handles rows w, w + 8, ... of the tile (raw[i]: row w + 8 i) for q,
// k and v alike. All loads of a tensor are issued before any of its values is
// used (the kernel is bound by memory latency otherwise): q and k first, v
// once q's registers are free (without q: k and v at once).
template <bool kQ>  // false: k and v only (q came from attn_qkv, AttnQkvParams::fp8)
__global__ void __launch_bounds__(kWarps * 32, 2)
    attention_fp8_quantize_kernel(const uint16_t* __restrict__ q, const uint16_t* __restrict__ k,
                                  const uint16_t* __restrict__ v, const int32_t* __restrict__ cu, int nseq, int h,
                                  FlashFp8Operands f) {
  AttnTile t;
  const int tile = static_cast<int>(blockIdx.x);
  if (!attn_tile(tile, cu, nseq, t)) return;
  const int head = static_cast<int>(blockIdx.y);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int rows = static_cast<int>(t.end - t.q0 < kAttnTile ? t.end - t.q0 : kAttnTile);
  const int mine = rows > warp ? (rows - warp + kWarps - 1) / kWarps : 0;
  __shared__ float red[kWarps];
  __shared__ __align__(16) uint8_t vs[kAttnTile * kVtStride];
  uint2 rq[kRowsPerWarp], rk[kRowsPerWarp];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i)
    if (i < mine) {
      rq[i] = load4(kQ ? q : v, t.q0 + warp + i * kWarps, h, head, lane);  // without q: v at once
      rk[i] = load4(k, t.q0 + warp + i * kWarps, h, head, lane);
    }

  // Q: a scale per row.
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i)
    if (kQ && i < mine) {
      float x[4];
      unpack4(rq[i], x);
      const float sc = fp8_act_scale(dev::fp8_warp_amax(amax4(x)));
      const int64_t row = (t.q0 + warp + i * kWarps) * h + head;
      if (lane == 0) f.sq[row] = sc;
      reinterpret_cast<uint32_t*>(f.q + row * kHD)[lane] = dev::fp8_quant4(x, sc, fp8_act_rcp(sc));
    }
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i)
    if (kQ && i < mine) rq[i] = load4(v, t.q0 + warp + i * kWarps, h, head, lane);

  // K and V: a scale per tile.
  float sc = fp8_act_scale(tile_amax(rk, mine, red)), rcp = fp8_act_rcp(sc);
  if (threadIdx.x == 0) f.sk[static_cast<int64_t>(tile) * h + head] = sc;
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i)
    if (i < mine) {
      float x[4];
      unpack4(rk[i], x);
      const int64_t row = (t.q0 + warp + i * kWarps) * h + head;
      reinterpret_cast<uint32_t*>(f.k + row * kHD)[lane] = dev::fp8_quant4(x, sc, rcp);
    }
  sc = fp8_act_scale(tile_amax(rq, mine, red));
  rcp = fp8_act_rcp(sc);
  if (threadIdx.x == 0) f.sv[static_cast<int64_t>(tile) * h + head] = sc;
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    uint32_t w = 0u;  // keys past the sample's end
    if (i < mine) {
      float x[4];
      unpack4(rq[i], x);
      w = dev::fp8_quant4(x, sc, rcp);
    }
    *reinterpret_cast<uint32_t*>(vs + (warp + i * kWarps) * kVtStride + 4 * lane) = w;
  }
  __syncthreads();
  store_vt_tile(vs, kVtStride, f.vt + static_cast<int64_t>(head) * kHD * f.vt_cols + static_cast<int64_t>(tile) * kAttnTile,
                f.vt_cols, warp, kWarps, lane);
}

// The scratch of one (device, stream): grown to the largest call's bytes, owned for the process.
using ScratchKey = std::tuple<int, cudaStream_t>;
struct Scratch {
  void* base = nullptr;
  int64_t bytes = 0;
  ~Scratch() {
    if (base) cudaFree(base);  // errors ignored: may run at process exit
  }
};

}  // namespace

int64_t attention_fp8_bytes(int64_t t, int64_t h, int64_t nseq) { return fp8_attention_layout(t, h, kHD, nseq).bytes; }

FlashFp8Operands attention_fp8_layout(void* base, int64_t t, int64_t h, int64_t nseq) {
  MAGI2_CHECK(base != nullptr && reinterpret_cast<uintptr_t>(base) % 256 == 0,
              "attention_fp8_layout: needs a 256-byte aligned device buffer");
  const Fp8AttentionLayout l = fp8_attention_layout(t, h, kHD, nseq);
  char* b = static_cast<char*>(base);
  return {.q = reinterpret_cast<uint8_t*>(b + l.q), .k = reinterpret_cast<uint8_t*>(b + l.k),
          .vt = reinterpret_cast<uint8_t*>(b + l.vt), .sq = reinterpret_cast<float*>(b + l.sq),
          .sk = reinterpret_cast<float*>(b + l.sk), .sv = reinterpret_cast<float*>(b + l.sv), .vt_cols = l.vt_cols};
}

void attention_fp8_quantize(const AttentionParams& p, const AttentionShape& a, const FlashFp8Operands& f,
                            cudaStream_t s, bool with_q) {
  MAGI2_CHECK(a.hd == kHD, "attention.fp8: needs head dim ", kHD, " (got ", a.hd, ")");
  MAGI2_CHECK(a.h <= 65535 && a.t < (int64_t{1} << 31), "attention.fp8: too many heads or tokens");
  if (a.t == 0 || a.h == 0) return;
  const int64_t tiles = attn_tiles_bound(a.t, a.nseq);
  const auto kernel = with_q ? attention_fp8_quantize_kernel<true> : attention_fp8_quantize_kernel<false>;
  kernel<<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(a.h)), kWarps * 32, 0, s>>>(
      with_q ? p.q.data_as<uint16_t>() : nullptr, p.k.data_as<uint16_t>(), p.v.data_as<uint16_t>(),
                                       a.cu, static_cast<int>(a.nseq), static_cast<int>(a.h), f);
  MAGI2_CUDA_CHECK_LAUNCH("attention_fp8_quantize");
}

FlashFp8Operands attention_fp8_operands(int64_t t, int64_t h, int64_t nseq, cudaStream_t s) {
  static std::mutex mu;
  static auto* cache = new std::map<ScratchKey, Scratch>();  // never destroyed: no CUDA calls at static destruction
  int dev = 0;
  MAGI2_CUDA_CHECK(cudaGetDevice(&dev));
  const int64_t bytes = attention_fp8_bytes(t, h, nseq);
  std::lock_guard<std::mutex> lock(mu);
  Scratch& sc = (*cache)[ScratchKey{dev, s}];
  if (sc.bytes < bytes) {
    check_not_capturing(s, "attention.fp8: no scratch for T=", t, ", H=", h, ", nseq=", nseq,
                        " was made before stream capture (run one eager forward of this request shape first)");
    MAGI2_CUDA_CHECK(cudaStreamSynchronize(s));  // earlier calls on s may still read the old buffer
    if (sc.base) MAGI2_CUDA_CHECK(cudaFree(sc.base));
    sc.base = nullptr;
    sc.bytes = 0;
    MAGI2_CUDA_CHECK(cudaMalloc(&sc.base, static_cast<size_t>(bytes)));
    sc.bytes = bytes;
  }
  return attention_fp8_layout(sc.base, t, h, nseq);
}

void attention_fp8(const AttentionParams& p, const AttentionShape& a, cudaStream_t s) {
  MAGI2_CHECK(attention_flash_supported(a.hd) && p.lse.defined(), "attention.fp8: needs head dim ", kHD,
              " and the lse output (the deferred sink), got head dim ", a.hd, p.lse.defined() ? "" : " and no lse",
              attention_flash_supported(kHD) ? "" : " (this build has no CUTLASS headers)");
  if (a.t == 0 || a.h == 0) return;
  const FlashFp8Operands f = attention_fp8_operands(a.t, a.h, a.nseq, s);
  // fp8_from_qkv: attn_qkv (AttnQkvParams::fp8) filled this scratch just before.
  if (!p.fp8_from_qkv) attention_fp8_quantize(p, a, f, s);
  attention_flash_fp8(p, a, f, s);
}

}  // namespace magi2::cuda
