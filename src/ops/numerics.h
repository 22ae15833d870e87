// Scalar numerics shared by the host and the device: one definition of each
// element-wise formula whose bytes must agree between the CPU reference, the
// host-side sampler and the CUDA kernels. Light header: no library includes,
// compiles as plain C++ and under nvcc (functions are __host__ __device__ there).
//
// Every function performs the official code's fp32 operations one rounding at a
// time, in the official order. Both compilers must leave the expressions
// uncontracted (no FMA): the project builds host code with -ffp-contract=off and
// device code with --fmad=false, which keeps these bit-identical everywhere.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MAGI2_HD __host__ __device__ __forceinline__
#else
#define MAGI2_HD inline
#endif

namespace magi2 {

/// Classifier-free guidance of one element (spec pipeline §5.4; official
/// Magi2PreviewSampler.cfg_velocity with the released config):
/// uncond + scale * (cond - uncond), one fp32 rounding per operation.
MAGI2_HD float cfg_combine_f32(float cond, float uncond, float scale) {
  const float diff = cond - uncond;
  const float scaled = scale * diff;
  return uncond + scaled;
}

/// The scalars of one FlowUniPC step i (spec pipeline §5.3; official
/// FlowUniPCMultistepScheduler.step): the x0 prediction's sigma, the UniC
/// corrector over interval i-1 (when i > 0) and the UniP predictor over
/// interval i. Built on the host by FlowUniPC::step_table(); 16 floats, so a
/// table of S steps is an [S, 16] f32 tensor the device reads by step index.
struct UniPcStepCoef {
  float sigma = 0;      ///< sigmas[i]
  float corrector = 0;  ///< 1: apply UniC to the incoming sample (i > 0)
  float c_order = 1;    ///< corrector order (1 or 2)
  float c_A = 0, c_E_phi = 0, c_E_B = 0, c_inv_r1 = 0, c_rho0 = 0, c_rho1 = 0;
  float p_order = 1;    ///< predictor order (1 or 2)
  float p_A = 0, p_E_phi = 0, p_E_B = 0, p_inv_r1 = 0;
  float pad0 = 0, pad1 = 0;
};
static_assert(sizeof(UniPcStepCoef) == 16 * sizeof(float), "UniPcStepCoef is one [16] f32 row");

/// One FlowUniPC step on one element, in place. x: the sample (in: x_i, out:
/// x_{i+1}); v: the model's velocity at x_i; last: the corrected sample the
/// previous predictor started from (out: this step's); m0, m1: the newest and
/// the previous x0 predictions (out: shifted by one). Operation order as the
/// official code (FlowUniPC::correct / predict document the expressions):
///   m = x - sigma*v;  UniC: x = (A*last - E_phi*m0) - E_B*res_c;
///   UniP: x = (A*x - E_phi*m) - E_B*res_p, D1 = (m_prev - m) * f32(1/r1).
MAGI2_HD void flow_unipc_element(const UniPcStepCoef& c, float v, float& x, float& last, float& m0, float& m1) {
  const float sv = c.sigma * v;
  const float m_new = x - sv;
  if (c.corrector != 0.0f) {
    const float t1 = c.c_A * last;
    const float t2 = c.c_E_phi * m0;
    const float base = t1 - t2;
    float res;
    if (c.c_order == 1.0f) {
      const float d1t = m_new - m0;
      const float w = c.c_rho0 * d1t;
      res = w + 0.0f;  // official: python 0 + tensor
    } else {
      const float dm = m1 - m0;
      const float d1 = dm * c.c_inv_r1;
      const float a = c.c_rho0 * d1;
      const float d1t = m_new - m0;
      const float b = c.c_rho1 * d1t;
      res = a + b;
    }
    const float corr = c.c_E_B * res;
    x = base - corr;
  }
  m1 = m0;
  m0 = m_new;
  last = x;
  const float t1 = c.p_A * x;
  const float t2 = c.p_E_phi * m0;
  const float base = t1 - t2;
  if (c.p_order == 1.0f) {
    const float corr = c.p_E_B * 0.0f;  // the official scalar times a python 0: keep the signed zero
    x = base - corr;
  } else {
    const float dm = m1 - m0;
    const float d1 = dm * c.p_inv_r1;
    const float res = 0.5f * d1;  // rhos_p = [0.5] for order 2
    const float corr = c.p_E_B * res;
    x = base - corr;
  }
}

/// True when the fp32 bit pattern is not a finite number (NaN or +-inf); safe
/// under any floating-point flags since it looks only at the exponent bits.
MAGI2_HD bool is_nonfinite_bits(uint32_t bits) { return (bits & 0x7f800000u) == 0x7f800000u; }

}  // namespace magi2
