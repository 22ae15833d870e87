// H_post and the Sinkhorn H_res of one token (spec magi2-dit.md §9.4-9.5) by
// one thread, in the CPU reference's operations and orders (src/cpu/mhc.cpp):
// shared by the reference kernel (mhc.cu) and the fast one (mhc_fused.cu).
// Include only from .cu files.
#pragma once

#include "cuda/device_fp.cuh"

namespace magi2::cuda::dev {

/// `l` [24]: the token's logits; ac_post / ac_res = alpha * c (fp32). Writes
/// hp [4] = bf16(2 sigmoid(ac_post l[4 + i] + b_post[i])) and m [4][4] =
/// bf16(Sinkhorn(exp(Z - max Z))) with Z = ac_res l[8 + 4 i + j] + b_res[4 i + j],
/// as fp32 values. `expf_` is exp_f32 with one of its table sources (same bits).
template <class Exp>
__device__ __forceinline__ void mhc_post_coefs(const float* l, float ac_post, float ac_res,
                                               const float* __restrict__ b_post, const float* __restrict__ b_res,
                                               int iters, float sk_eps, Exp expf_, float hp[4], float m[4][4]) {
  constexpr int n = 4;
  for (int i = 0; i < n; ++i) hp[i] = round_bf16(2.0f * sigmoid_f32(ac_post * l[4 + i] + b_post[i]));
  float mx = -INFINITY;
  bool nan = false;
#pragma unroll
  for (int i = 0; i < n; ++i)
#pragma unroll
    for (int j = 0; j < n; ++j) {
      m[i][j] = ac_res * l[8 + 4 * i + j] + b_res[4 * i + j];
      nan = nan || isnan(m[i][j]);
      mx = (mx < m[i][j]) ? m[i][j] : mx;  // std::max's comparison
    }
  if (nan) mx = NAN;  // amax propagates NaN
#pragma unroll
  for (int i = 0; i < n; ++i)
#pragma unroll
    for (int j = 0; j < n; ++j) m[i][j] = expf_(m[i][j] - mx);
  // Column normalisation first (sequential sums), then rows ((x0 + x2) + (x1 + x3)), spec §9.5.
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int j = 0; j < n; ++j) {
      const float sum = ((m[0][j] + m[1][j]) + m[2][j]) + m[3][j];
#pragma unroll
      for (int i = 0; i < n; ++i) m[i][j] = m[i][j] / (sum + sk_eps);
    }
#pragma unroll
    for (int i = 0; i < n; ++i) {
      const float sum = (m[i][0] + m[i][2]) + (m[i][1] + m[i][3]);
#pragma unroll
      for (int j = 0; j < n; ++j) m[i][j] = m[i][j] / (sum + sk_eps);
    }
  }
#pragma unroll
  for (int i = 0; i < n; ++i)
#pragma unroll
    for (int j = 0; j < n; ++j) m[i][j] = round_bf16(m[i][j]);
}

/// mhc_post_coefs of the token whose logits are `l`, with the shared-memory
/// exp table (exp2_table_to_shared), stored as 20 floats in `cf` (H_post, then
/// H_res row-major) and, where not null, in hp_out [4] and hr_out [16].
__device__ __forceinline__ void mhc_post_coefs_store(const float* l, float ac_post, float ac_res,
                                                     const float* __restrict__ b_post,
                                                     const float* __restrict__ b_res, int iters, float sk_eps,
                                                     const uint64_t* exp_table, float* cf, float* hp_out,
                                                     float* hr_out) {
  constexpr int n = 4;
  float hp[n], m[n][n];
  mhc_post_coefs(l, ac_post, ac_res, b_post, b_res, iters, sk_eps,
                 [exp_table](float x) { return exp_f32(x, exp_table); }, hp, m);
  for (int i = 0; i < n; ++i) {
    cf[i] = hp[i];
    if (hp_out != nullptr) hp_out[i] = hp[i];
    for (int j = 0; j < n; ++j) {
      cf[n + n * i + j] = m[i][j];
      if (hr_out != nullptr) hr_out[n * i + j] = m[i][j];
    }
  }
}

}  // namespace magi2::cuda::dev
