// The attention glue's per-lane steps on one (token, head) vector of head dim
// 128 held by a half-warp, 8 elements a lane (8 lane .. 8 lane + 7): bf16
// loads and stores, the q/k RMSNorm with rms_norm's summation order and RoPE
// with the partner element by shuffle, shared by attn_qkv's register kernel
// (attn_glue.cu) and the FP8 attention operands' tile producer
// (attn_qkv_fp8.cu), so both give attn_qkv_kernel's bytes. Device-only header.
#pragma once

#include <cstdint>

#include "cuda/device_fp.cuh"

namespace magi2::cuda::glue {

using dev::bf16_to_f32;
using dev::f32_to_bf16;

/// 8 bf16 values at p as fp32 (one 16-byte load when `vec`).
__device__ __forceinline__ void load8(const uint16_t* p, bool vec, float* f) {
  if (vec) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      f[2 * j] = bf16_to_f32(static_cast<uint16_t>(w[j] & 0xffffu));
      f[2 * j + 1] = bf16_to_f32(static_cast<uint16_t>(w[j] >> 16));
    }
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) f[j] = bf16_to_f32(p[j]);
  }
}

/// Stores 8 fp32 values at p as bf16 (one 16-byte store when `vec`).
__device__ __forceinline__ void store8(uint16_t* p, bool vec, const float* f) {
  if (vec) {
    uint32_t w[4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
      w[j] = static_cast<uint32_t>(f32_to_bf16(f[2 * j])) | (static_cast<uint32_t>(f32_to_bf16(f[2 * j + 1])) << 16);
    *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) p[j] = f32_to_bf16(f[j]);
  }
}

/// 1 / sqrt(mean square + eps) of the vector xv with rms_norm's summation order (lane j: i = j mod 16).
__device__ __forceinline__ float inv_rms(const float* xv, int hd, int lane, unsigned mask, float eps) {
  float acc = 0.f;
  for (int i = lane; i < hd; i += 16) acc += xv[i] * xv[i];
  for (int off = 8; off >= 1; off /= 2) acc += __shfl_down_sync(mask, acc, off, 16);
  acc = __shfl_sync(mask, acc, 0, 16);
  const float ms = acc * (1.0f / static_cast<float>(hd));
  return 1.0f / sqrtf(ms + eps);
}

/// The head dim of the register kernels; floats per half-warp of shared memory
/// for the sums: q, k, and a 16-bank offset (the two half-warps of a warp sit
/// 16 banks apart).
constexpr int kRegHd = 128;
constexpr int kRegStride = 2 * kRegHd + 16;

/// 8 fp32 values at p (16-byte aligned) in two 16-byte loads.
__device__ __forceinline__ void load8_f32(const float* p, float* f) {
  const float4 a = *reinterpret_cast<const float4*>(p), b = *reinterpret_cast<const float4*>(p + 4);
  f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}

/// rms_norm's fp32 output of this lane's 8 elements f (raw values, also in xv
/// for the sum) with the gains w8 (the lane's 8).
__device__ __forceinline__ void norm8(float* f, const float* xv, const float* w8, int lane, unsigned mask,
                                      float eps) {
  const float rs = inv_rms(xv, kRegHd, lane, mask, eps);
  float w[8];
  load8_f32(w8, w);
#pragma unroll
  for (int j = 0; j < 8; ++j) f[j] = (f[j] * rs) * (w[j] + 1.0f);
}

/// rope on this lane's 8 normalised elements f: lanes below hl hold the first
/// rotary half, the next hl lanes the second, the rest pass through.
__device__ __forceinline__ void rope8(float* f, const float* sn, const float* cs, int lane, int hl, int partner,
                                      unsigned mask) {
  float p[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) p[j] = __shfl_sync(mask, f[j], partner, 16);
  if (lane < hl) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float a = f[j] * cs[j];
      const float b = (-p[j]) * sn[j];
      f[j] = a + b;
    }
  } else if (lane < 2 * hl) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float c = f[j] * cs[j];
      const float d = p[j] * sn[j];
      f[j] = c + d;
    }
  }
}

/// q's and k's normalised and rotated fp32 values (fq, fk) from their raw
/// bf16 words rq, rk: the gains q_w, k_w are the lane's 8 of its row's group,
/// `row` the token's sin/cos table row (sin at [0, half), cos at [half, 2 half)).
/// xq, xk: this half-warp's kRegHd floats each of shared memory (the sum's
/// transpose); the caller keeps them unread by other lanes until `mask`'s lanes
/// have all called this.
__device__ __forceinline__ void qk_norm_rope8(uint4 rq, uint4 rk, float* xq, float* xk, const float* q_w,
                                              const float* k_w, const float* row, int half, int lane, unsigned mask,
                                              float eps, float (&fq)[8], float (&fk)[8]) {
  load8(reinterpret_cast<const uint16_t*>(&rq), true, fq);
  load8(reinterpret_cast<const uint16_t*>(&rk), true, fk);
  *reinterpret_cast<float4*>(xq + lane * 8) = make_float4(fq[0], fq[1], fq[2], fq[3]);
  *reinterpret_cast<float4*>(xq + lane * 8 + 4) = make_float4(fq[4], fq[5], fq[6], fq[7]);
  *reinterpret_cast<float4*>(xk + lane * 8) = make_float4(fk[0], fk[1], fk[2], fk[3]);
  *reinterpret_cast<float4*>(xk + lane * 8 + 4) = make_float4(fk[4], fk[5], fk[6], fk[7]);
  __syncwarp(mask);
  norm8(fq, xq, q_w, lane, mask, eps);
  norm8(fk, xk, k_w, lane, mask, eps);
  const int hl = half / 8;  // lanes per rotary half
  const int partner = lane < hl ? lane + hl : lane < 2 * hl ? lane - hl : lane;
  float sn[8] = {}, cs[8] = {};
  if (lane < 2 * hl) {
    const int c = (lane < hl ? lane : lane - hl) * 8;  // the table column of this lane's first element
    load8_f32(row + c, sn);
    load8_f32(row + half + c, cs);
  }
  rope8(fq, sn, cs, lane, hl, partner, mask);
  rope8(fk, sn, cs, lane, hl, partner, mask);
}

}  // namespace magi2::cuda::glue
