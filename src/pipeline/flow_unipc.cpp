// FlowUniPC scheduler: see flow_unipc.h for the contract and the rounding model.
#include "pipeline/flow_unipc.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace magi2 {

namespace {

constexpr int kSolverOrder = 2;

void set_corrector(UniPcStepCoef& c, const FlowUniPCInterval& iv) {
  c.corrector = 1.0f;
  c.c_order = static_cast<float>(iv.order);
  c.c_A = iv.A;
  c.c_E_phi = iv.E_phi;
  c.c_E_B = iv.E_B;
  c.c_inv_r1 = iv.inv_r1;
  c.c_rho0 = iv.rho_c[0];
  c.c_rho1 = iv.rho_c[1];
}

void set_predictor(UniPcStepCoef& c, const FlowUniPCInterval& iv) {
  c.p_order = static_cast<float>(iv.order);
  c.p_A = iv.A;
  c.p_E_phi = iv.E_phi;
  c.p_E_B = iv.E_B;
  c.p_inv_r1 = iv.inv_r1;
}

// f32 log / expm1 rounded correctly (through double). PyTorch's CPU kernels
// (Sleef, u10) return these for the schedule's inputs; glibc's logf/expm1f
// are off by one ulp on some of them, and lambda differences cancel
// catastrophically, which alone costs ~1e-6 relative over 100 steps.
float log_f32(float x) { return static_cast<float>(std::log(static_cast<double>(x))); }
float expm1_f32(float x) { return static_cast<float>(std::expm1(static_cast<double>(x))); }

// lambda(sigma) = log(alpha) - log(sigma), both logs and the difference in
// f32 (official: two f32 CPU tensor logs). sigma = 0 gives +inf on purpose:
// the last interval relies on it (expm1(-inf) = -1, so A = 0, E = -1).
float lambda_of(float sigma) {
  const float alpha = 1.0f - sigma;
  const float la = log_f32(alpha);
  const float ls = log_f32(sigma);
  return la - ls;
}

}  // namespace

std::vector<double> linspace_f64(double start, double stop, int num) {
  MAGI2_CHECK(num >= 0, "linspace_f64: num must be >= 0, got ", num);
  std::vector<double> y(static_cast<size_t>(num));
  if (num == 0) return y;
  if (num == 1) {
    y[0] = start;
    return y;
  }
  const double div = static_cast<double>(num - 1);
  const double delta = stop - start;
  const double step = delta / div;
  for (int i = 0; i < num; ++i) {
    // numpy rounds the multiply and the add separately (two ufuncs); volatile
    // keeps any compiler from contracting them into an FMA.
    if (step == 0) {
      // numpy's denormal-step branch: (i / div) * delta + start.
      volatile double q = static_cast<double>(i) / div;
      volatile double prod = q * delta;
      y[static_cast<size_t>(i)] = prod + start;
    } else {
      volatile double prod = static_cast<double>(i) * step;
      y[static_cast<size_t>(i)] = prod + start;
    }
  }
  y.back() = stop;
  return y;
}

void solve2x2_f32(const float a[2][2], const float b[2], float x[2]) {
  // getrf: pivot on column 0 (ties keep row 0, as isamax does), multiplier
  // scaled by the pivot's reciprocal, Schur update as an FMA (GPU code).
  // The FMAs are what the golden trajectory pins down (separate roundings
  // leave ~400 elements 1-2 ulp off); reciprocal vs division for the
  // multiplier made no difference there.
  const int p = std::fabs(a[1][0]) > std::fabs(a[0][0]) ? 1 : 0;
  const int q = 1 - p;
  const float u00 = a[p][0], u01 = a[p][1];
  MAGI2_CHECK(u00 != 0.0f, "solve2x2_f32: singular matrix (zero column 0)");
  const float recip = 1.0f / u00;
  const float l10 = a[q][0] * recip;
  const float u11 = std::fma(-l10, u01, a[q][1]);
  MAGI2_CHECK(u11 != 0.0f, "solve2x2_f32: singular matrix (zero pivot 1)");
  // getrs: forward substitution (FMA), back substitution with true division.
  const float y0 = b[p];
  const float y1 = std::fma(-l10, y0, b[q]);
  const float x1 = y1 / u11;
  const float r0 = std::fma(-x1, u01, y0);
  x[0] = r0 / u00;
  x[1] = x1;
}

FlowUniPC::FlowUniPC(int num_train_timesteps) : num_train_(num_train_timesteps) {
  MAGI2_CHECK(num_train_timesteps > 1, "FlowUniPC: num_train_timesteps must be > 1, got ",
              num_train_timesteps);
  // Training schedule: alphas = linspace(1, 1/N, N) reversed, sigmas = 1 - alphas
  // (f64), then f32. Only its two ends are used later (as doubles of the f32).
  const std::vector<double> alphas = linspace_f64(1.0, 1.0 / num_train_, num_train_);
  sigma_max_ = static_cast<double>(static_cast<float>(1.0 - alphas.back()));
  sigma_min_ = static_cast<double>(static_cast<float>(1.0 - alphas.front()));
}

void FlowUniPC::set_timesteps(int num_steps, double shift) {
  MAGI2_CHECK(num_steps > 0, "FlowUniPC::set_timesteps: num_steps must be > 0, got ", num_steps);
  MAGI2_CHECK(shift > 0 && std::isfinite(shift),
              "FlowUniPC::set_timesteps: shift must be finite and > 0, got ", shift);
  std::vector<double> s = linspace_f64(sigma_max_, sigma_min_, num_steps + 1);
  s.pop_back();
  timesteps_.assign(static_cast<size_t>(num_steps), 0);
  sigmas_.assign(static_cast<size_t>(num_steps) + 1, 0.0f);
  for (size_t i = 0; i < s.size(); ++i) {
    // numpy evaluates shift*s, (shift-1)*s, 1+that, and the quotient as four ufuncs.
    volatile double num = shift * s[i];
    volatile double den_part = (shift - 1.0) * s[i];
    volatile double den = 1.0 + den_part;
    const double shifted = num / den;
    volatile double t = shifted * static_cast<double>(num_train_);
    timesteps_[i] = static_cast<int64_t>(t);  // torch .to(int64) truncates toward zero
    sigmas_[i] = static_cast<float>(shifted);
  }
  sigmas_.back() = 0.0f;  // final_sigmas_type "zero"

  step_index_ = -1;
  lower_order_nums_ = 0;
  this_order_ = 0;
  n_ = 0;
  num_outputs_ = 0;
  have_last_sample_ = false;
  m_prev_.clear();
  m_prev2_.clear();
  last_sample_.clear();
}

int FlowUniPC::predictor_order(int i) const {
  MAGI2_CHECK(i >= 0 && i < num_steps(), "FlowUniPC::predictor_order: step ", i,
              " outside [0, ", num_steps(), ")");
  return std::min({kSolverOrder, num_steps() - i, i + 1});
}

FlowUniPCInterval FlowUniPC::interval(int j, int order) const {
  MAGI2_CHECK(!sigmas_.empty(), "FlowUniPC::interval: set_timesteps() was not called");
  MAGI2_CHECK(j >= 0 && j < num_steps(), "FlowUniPC::interval: interval ", j, " outside [0, ",
              num_steps(), ")");
  MAGI2_CHECK(order == 1 || (order == 2 && j >= 1), "FlowUniPC::interval: order ", order,
              " not available for interval ", j);
  FlowUniPCInterval c;
  c.j = j;
  c.order = order;
  c.sigma_s0 = sigmas_[static_cast<size_t>(j)];
  c.sigma_t = sigmas_[static_cast<size_t>(j) + 1];
  c.alpha_t = 1.0f - c.sigma_t;
  const float lambda_t = lambda_of(c.sigma_t);
  const float lambda_s0 = lambda_of(c.sigma_s0);
  c.h = lambda_t - lambda_s0;
  const float hh = -c.h;  // predict_x0
  c.h_phi_1 = expm1_f32(hh);
  c.B_h = expm1_f32(hh);

  // b_k = h_phi_k * k! / B_h with h_phi_{k+1} = h_phi_k / hh - 1/(k+1)!.
  const float phi_1 = c.h_phi_1 / hh;
  const float h_phi_k1 = phi_1 - 1.0f;
  const float b1_num = h_phi_k1 * 1.0f;
  c.b[0] = b1_num / c.B_h;
  const float phi_2 = h_phi_k1 / hh;
  const float h_phi_k2 = phi_2 - 0.5f;
  const float b2_num = h_phi_k2 * 2.0f;
  c.b[1] = b2_num / c.B_h;

  c.A = c.sigma_t / c.sigma_s0;
  c.E_phi = c.alpha_t * c.h_phi_1;
  c.E_B = c.alpha_t * c.B_h;

  if (order == 2) {
    const float lambda_s1 = lambda_of(sigmas_[static_cast<size_t>(j) - 1]);
    const float dl = lambda_s1 - lambda_s0;
    c.r1 = dl / c.h;
    c.inv_r1 = 1.0f / c.r1;
    const float R[2][2] = {{1.0f, 1.0f}, {c.r1, 1.0f}};
    solve2x2_f32(R, c.b, c.rho_c);
  } else {
    c.rho_c[0] = 0.5f;
    c.rho_c[1] = 0.0f;
  }
  return c;
}

std::vector<UniPcStepCoef> FlowUniPC::step_table() const {
  MAGI2_CHECK(!timesteps_.empty(), "FlowUniPC::step_table: set_timesteps() was not called");
  std::vector<UniPcStepCoef> t(timesteps_.size());
  for (int i = 0; i < num_steps(); ++i) {
    UniPcStepCoef& c = t[static_cast<size_t>(i)];
    c.sigma = sigmas_[static_cast<size_t>(i)];
    if (i > 0) set_corrector(c, interval(i - 1, predictor_order(i - 1)));
    set_predictor(c, interval(i, predictor_order(i)));
  }
  return t;
}

void FlowUniPC::begin_step_checks(size_t n) {
  MAGI2_CHECK(!sigmas_.empty(), "FlowUniPC::step: set_timesteps() was not called");
  MAGI2_CHECK(step_index_ < num_steps(), "FlowUniPC::step: all ", num_steps(),
              " steps of the schedule were already taken");
  MAGI2_CHECK(n > 0, "FlowUniPC::step: empty sample");
  if (n_ == 0) {
    n_ = n;
    m_prev_.assign(n, 0.0f);
    m_prev2_.assign(n, 0.0f);
    last_sample_.assign(n, 0.0f);
  }
  MAGI2_CHECK(n == n_, "FlowUniPC::step: sample has ", n, " elements, earlier steps had ", n_);
}

void FlowUniPC::step_inplace(std::span<const float> model_output, std::span<float> sample) {
  MAGI2_CHECK(model_output.size() == sample.size(), "FlowUniPC::step: model_output has ",
              model_output.size(), " elements, sample has ", sample.size());
  begin_step_checks(sample.size());
  if (step_index_ < 0) step_index_ = 0;
  const int i = step_index_;

  const bool use_corrector = i > 0 && have_last_sample_;

  // One element formula for the host and the device (ops/numerics.h): x0
  // prediction from the incoming sample, UniC correction of it (from step 1
  // on), history shift, UniP predictor to sigmas[i+1].
  UniPcStepCoef c;
  c.sigma = sigmas_[static_cast<size_t>(i)];
  if (use_corrector) set_corrector(c, interval(i - 1, this_order_));
  num_outputs_ = std::min(num_outputs_ + 1, kSolverOrder);
  // lower_order_final, then warm-up.
  const int order = std::min(kSolverOrder, num_steps() - i);
  this_order_ = std::min(order, lower_order_nums_ + 1);
  MAGI2_ASSERT(this_order_ > 0 && this_order_ <= num_outputs_);
  set_predictor(c, interval(i, this_order_));
  for (size_t k = 0; k < n_; ++k)
    flow_unipc_element(c, model_output[k], sample[k], last_sample_[k], m_prev_[k], m_prev2_[k]);
  have_last_sample_ = true;

  if (lower_order_nums_ < kSolverOrder) ++lower_order_nums_;
  ++step_index_;
}

void FlowUniPC::step_inplace(std::span<const float> model_output, int64_t timestep,
                             std::span<float> sample) {
  if (step_index_ < 0 && !timesteps_.empty()) {
    int first = -1, count = 0, second = -1;
    for (int k = 0; k < num_steps(); ++k) {
      if (timesteps_[static_cast<size_t>(k)] != timestep) continue;
      if (count == 0) first = k;
      if (count == 1) second = k;
      ++count;
    }
    MAGI2_CHECK(count > 0, "FlowUniPC::step: timestep ", timestep, " is not in the schedule");
    // Official _init_step_index: the second occurrence when duplicated.
    step_index_ = count > 1 ? second : first;
  }
  step_inplace(model_output, sample);
}

Tensor FlowUniPC::step(const Tensor& model_output, const Tensor& sample) {
  MAGI2_CHECK(model_output.dtype() == DType::F32 && sample.dtype() == DType::F32,
              "FlowUniPC::step: model_output and sample must be F32");
  MAGI2_CHECK(model_output.device() == Device::CPU && sample.device() == Device::CPU,
              "FlowUniPC::step: model_output and sample must be CPU tensors");
  MAGI2_CHECK(model_output.is_contiguous() && sample.is_contiguous(),
              "FlowUniPC::step: model_output and sample must be contiguous");
  MAGI2_CHECK(model_output.shape() == sample.shape(), "FlowUniPC::step: model_output shape ",
              shape_str(model_output.shape()), " != sample shape ", shape_str(sample.shape()));
  Tensor out = sample.clone();
  const size_t n = static_cast<size_t>(out.numel());
  step_inplace(std::span<const float>(model_output.data_as<float>(), n),
               std::span<float>(out.data_as<float>(), n));
  return out;
}

std::vector<float> FlowUniPC::step(const std::vector<float>& model_output,
                                   const std::vector<float>& sample) {
  std::vector<float> out = sample;
  step_inplace(model_output, out);
  return out;
}

}  // namespace magi2
