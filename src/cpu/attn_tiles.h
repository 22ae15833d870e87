// The register-tiled score / softmax / P*V kernels of the CPU attention
// (attention.cpp), shared with the block-sparse attention of the refiner
// (block_sparse_attention.cpp) so that both give the same bytes for the same
// keys: fixed summation orders, no FMA contraction, one code path per CPU.
#pragma once

#include <cstdint>

#include "cpu/cpu_common.h"

namespace magi2::cpu {

constexpr int kTileQ = 4;   ///< queries per register tile
constexpr int kTileK = 64;  ///< keys per register tile

/// e^x for x <= 0 within ~2 ulp of expf (0 below -87); plain float ops.
float exp_nonpositive(float x);

/// s[i * lds + j] = scale * sum_d q[i * hd + d] * kt[d * ld + j] (d ascending)
/// for nq <= kTileQ queries and nk <= kTileK keys; kt is one head's K^T [hd][ld].
void score_tile(const float* q, int64_t hd, const float* kt, int64_t ld, int nq, int nk, float scale, float* s,
                int64_t lds);

/// Row softmax numerator in place: s[j] = e^(s[j] - max) over n values;
/// writes the max and the sum (16 interleaved partial sums, then a fixed tree).
void exp_row(float* s, int64_t n, float* row_max, float* row_sum);

/// acc[i * hd + d] = sum_j p[i * ldp + j] * v[j * hd + d] (j ascending) for
/// nq <= kTileQ queries over `len` keys; v is one head's V [len][hd].
void pv_tile(const float* p, int64_t ldp, const float* v, int64_t len, int64_t hd, int nq, float* acc);

}  // namespace magi2::cpu
