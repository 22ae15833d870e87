// The device scratch of FP8 attention (AttentionParams::fp8 on CUDA:
// src/cuda/attention_fp8.cu carves it, the memory plan counts it): e4m3 Q and
// K [T, H, hd], e4m3 V^T [H, hd, 128 tiles] and the f32 scales, as byte
// offsets into one buffer. Header-only, so the engine (also in CPU-only
// builds) and the CUDA code share one formula.
#pragma once

#include <cstdint>

#include "ops/numerics.h"

namespace magi2 {

/// A bound on the 128-token tiles of T tokens in nseq samples (tiles counted
/// from each sample's first token): sum of ceil(len / 128) <= ceil(T / 128) +
/// nseq, without reading cu_seqlens. The flash kernels' grid and the FP8
/// key/value scales' rows.
inline int64_t attn_tiles_bound(int64_t t, int64_t nseq) { return (t + kFp8AttnTile - 1) / kFp8AttnTile + nseq; }

/// Byte offsets of one FP8 attention call's operands in one buffer, each
/// 256-byte aligned, and the buffer's bytes.
struct Fp8AttentionLayout {
  int64_t q = 0, k = 0, vt = 0;  ///< e4m3 [T, H, hd], [T, H, hd], [H, hd, vt_cols]
  int64_t sq = 0, sk = 0, sv = 0;  ///< f32 [T, H], [tiles, H], [tiles, H]
  int64_t tiles = 0, vt_cols = 0;  ///< attn_tiles_bound(T, nseq), 128 x tiles
  int64_t bytes = 0;
};

/// The layout for T tokens, H heads of head dim hd and nseq samples.
inline Fp8AttentionLayout fp8_attention_layout(int64_t t, int64_t h, int64_t hd, int64_t nseq) {
  Fp8AttentionLayout l;
  l.tiles = attn_tiles_bound(t, nseq);
  l.vt_cols = l.tiles * kFp8AttnTile;
  int64_t off = 0;
  auto take = [&](int64_t bytes) {
    const int64_t at = off;
    off += (bytes + 255) / 256 * 256;
    return at;
  };
  l.q = take(t * h * hd);
  l.k = take(t * h * hd);
  l.vt = take(h * hd * l.vt_cols);
  l.sq = take(t * h * 4);
  l.sk = take(l.tiles * h * 4);
  l.sv = take(l.tiles * h * 4);
  l.bytes = off;
  return l;
}

}  // namespace magi2
