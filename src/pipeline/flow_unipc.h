// FlowUniPC: the multistep UniPC solver for flow-matching models, as MAGI-2
// Preview samples with it (predictor UniP-2 + corrector UniC, B(h) = expm1,
// x0 prediction from a velocity output, lower order at the first and last
// step). Source: official inference/pipeline/sampler.py
// (FlowUniPCMultistepScheduler with its default configuration, which is what
// inference_engine.py constructs), spec magi2-pipeline.md §5.1-5.3 and App. A.
//
// Numerics follow the official code's rounding points, because golden tests
// compare 100 chained steps at ~1e-6 relative:
//  * the schedule is computed in float64 (numpy) and only then rounded to f32;
//  * every per-step scalar (alpha, lambda, h, expm1, A, E, r1, b) is an f32
//    0-d CPU tensor upstream, so it is computed here in float, one rounding per
//    operation, in the official order; log and expm1 are correctly rounded
//    (as PyTorch's CPU kernels return them here, unlike glibc's logf/expm1f);
//  * the element-wise updates are f32 with one rounding per torch op; division
//    of a tensor by the CPU scalar r1 is a multiplication by f32(1/r1), as
//    PyTorch's CUDA kernel does it;
//  * the 2x2 corrector system is solved in f32 by LU with partial pivoting,
//    with the rounding of the GPU solver (see solve2x2_f32).
// The element-wise loops rely on the project's flags (ISO C++, no
// -ffast-math: GCC does not contract a*b+c into an FMA there).
// Result: the golden 100-step trajectory and 6-step loop are reproduced bit
// for bit.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "ops/numerics.h"

namespace magi2 {

/// Scalar coefficients of one solver interval [sigmas[j], sigmas[j+1]]
/// (spec §5.3 notation; all f32, computed exactly as the official CPU code).
struct FlowUniPCInterval {
  int j = 0;              ///< interval index: from sigmas[j] to sigmas[j+1]
  int order = 1;          ///< 1 or 2 (2 needs sigmas[j-1])
  float sigma_s0 = 0;     ///< sigmas[j]
  float sigma_t = 0;      ///< sigmas[j+1]
  float alpha_t = 0;      ///< 1 - sigma_t
  float h = 0;            ///< lambda(sigma_t) - lambda(sigma_s0), lambda = ln(1-s) - ln(s)
  float h_phi_1 = 0;      ///< expm1(-h)
  float B_h = 0;          ///< expm1(-h) (solver type bh2)
  float A = 0;            ///< sigma_t / sigma_s0 (multiplies the sample)
  float E_phi = 0;        ///< alpha_t * h_phi_1 (multiplies the newest x0 prediction)
  float E_B = 0;          ///< alpha_t * B_h (multiplies the higher-order residual)
  float r1 = 0;           ///< (lambda(sigmas[j-1]) - lambda(sigma_s0)) / h; order 2 only
  float inv_r1 = 0;       ///< f32(1 / r1): the official D1 division is a reciprocal multiply
  float b[2] = {0, 0};    ///< UniPC b-vector (order-2 corrector right-hand side)
  float rho_c[2] = {0, 0};  ///< corrector weights: order 1 -> {0.5}; order 2 -> solve([[1,1],[r1,1]], b)
};

/// FlowUniPC scheduler (official name FlowUniPCMultistepScheduler) with the
/// configuration MAGI-2 uses: num_train_timesteps 1000, solver_order 2,
/// solver_type "bh2", predict_x0 true, prediction_type "flow_prediction",
/// lower_order_final true, disable_corrector [], final_sigmas_type "zero",
/// no thresholding, no dynamic shifting, constructor shift 1.0 (the shift is
/// given to set_timesteps). Two independent instances are used by the
/// pipeline, one for video and one for audio (spec §5.1).
///
/// Usage: set_timesteps(), then step() once per timestep, in order. State
/// (model-output history, last sample, warm-up counter) is per instance;
/// set_timesteps() resets it. Sample size is fixed by the first step().
class FlowUniPC {
 public:
  /// `num_train_timesteps` > 1 (MAGI-2: 1000); Error otherwise.
  explicit FlowUniPC(int num_train_timesteps = 1000);

  /// Builds the schedule of `num_steps` (> 0) steps with time shift `shift`
  /// (> 0; MAGI-2: 7.0) and resets the solver state. In float64:
  /// s = linspace(sigma_max, sigma_min, num_steps+1)[:num_steps] (numpy's
  /// formula), s = shift*s / (1 + (shift-1)*s); timesteps = int64(trunc(s*1000));
  /// sigmas = f32(s) followed by 0. sigma_max = f32(1 - 1/num_train) (0.999f),
  /// sigma_min = 0. Bit-identical to the official set_timesteps (§5.1).
  void set_timesteps(int num_steps, double shift);

  /// Integer model timesteps, [num_steps] (the DiT sees t/1000). Decreasing;
  /// duplicates possible for very large step counts.
  const std::vector<int64_t>& timesteps() const { return timesteps_; }
  /// Solver sigmas, [num_steps + 1] f32, last = 0.
  const std::vector<float>& sigmas() const { return sigmas_; }
  int num_steps() const { return static_cast<int>(timesteps_.size()); }
  /// Index of the next step, or -1 before the first step() after set_timesteps().
  int step_index() const { return step_index_; }
  /// Training-schedule extremes (as doubles of the f32 training sigmas).
  double sigma_max() const { return sigma_max_; }
  double sigma_min() const { return sigma_min_; }

  /// Predictor order p_i that step i will use: min(2, num_steps - i, i + 1)
  /// for a run that started at index 0 (lower_order_final + warm-up).
  int predictor_order(int i) const;

  /// Coefficients of interval j (0 <= j < num_steps) at the given order
  /// (order 2 requires j >= 1). Exposed so a device kernel can reuse them;
  /// Error on an invalid j/order or before set_timesteps().
  FlowUniPCInterval interval(int j, int order) const;

  /// The scalars of every step of a run that starts at step 0 (what the
  /// device loop's flow_unipc_step op reads per step; element formula
  /// flow_unipc_element in ops/numerics.h, the same one step_inplace uses).
  /// Error before set_timesteps().
  std::vector<UniPcStepCoef> step_table() const;

  /// One solver step on `sample` in place, with the model's velocity
  /// `model_output` (same size): x0 prediction m = x - sigma_i*v from the
  /// incoming sample, UniC correction of the incoming sample (from step 1 on),
  /// then the UniP predictor to sigmas[i+1]. On the first call after
  /// set_timesteps() the step index starts at 0. Errors: no schedule, all
  /// steps already taken, size mismatch with the arguments or earlier steps.
  void step_inplace(std::span<const float> model_output, std::span<float> sample);

  /// As step_inplace(), but like the official step(model_output, timestep,
  /// sample): on the first call the step index is looked up from `timestep`
  /// (its second occurrence if it occurs more than once, its first otherwise;
  /// Error if absent). Later calls ignore `timestep` (official behaviour: the
  /// internal counter rules).
  void step_inplace(std::span<const float> model_output, int64_t timestep,
                    std::span<float> sample);

  /// Functional form: returns the next sample. `model_output` and `sample`:
  /// contiguous CPU F32 tensors of equal shape (any rank); Error otherwise.
  Tensor step(const Tensor& model_output, const Tensor& sample);
  /// Functional form on vectors of equal length.
  std::vector<float> step(const std::vector<float>& model_output,
                          const std::vector<float>& sample);

 private:
  void begin_step_checks(size_t n);

  int num_train_ = 1000;
  double sigma_max_ = 0, sigma_min_ = 0;
  std::vector<int64_t> timesteps_;
  std::vector<float> sigmas_;

  // Solver state (official: model_outputs, last_sample, lower_order_nums,
  // this_order, _step_index).
  int step_index_ = -1;
  int lower_order_nums_ = 0;
  int this_order_ = 0;
  size_t n_ = 0;                 ///< sample size, fixed by the first step
  int num_outputs_ = 0;          ///< how many of m_prev_/m_prev2_ are valid (0..2)
  std::vector<float> m_prev_;    ///< newest x0 prediction
  std::vector<float> m_prev2_;   ///< the one before
  std::vector<float> last_sample_;  ///< corrected sample the last predictor started from
  bool have_last_sample_ = false;
};

/// numpy.linspace(start, stop, num) in float64 with numpy's exact formula
/// (y[i] = i*step + start, step = (stop-start)/(num-1), y[num-1] = stop).
/// Exposed for tests. Error if num < 0.
std::vector<double> linspace_f64(double start, double stop, int num);

/// Solves the 2x2 f32 system [[a00,a01],[a10,a11]] x = b as the official
/// torch.linalg.solve on the GPU does (LU with partial pivoting, multiplier =
/// a10 * f32(1/pivot), FMA for the elimination and forward/back updates, true
/// division by the pivots); this reproduces the golden trajectory bit for bit.
/// Error if the matrix is singular.
void solve2x2_f32(const float a[2][2], const float b[2], float x[2]);

}  // namespace magi2
