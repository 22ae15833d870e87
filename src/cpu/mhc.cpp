// mHC, manifold-constrained hyper-connections with 4 streams
// (spec magi2-dit.md §9; official MHCHandler in inference/model/magi2_preview.py).
#include <cmath>
#include <vector>

#include "cpu/cpu_common.h"
#include "cpu/cpu_ops.h"

namespace magi2::cpu {

namespace {

constexpr int kStreams = 4;
constexpr int kLogits = 2 * kStreams + kStreams * kStreams;  // 24

float scalar(const Tensor& t, const char* what) {
  MAGI2_CHECK(t.defined() && t.dtype() == DType::F32 && t.numel() == 1, what, ": expected one f32 value");
  return t.data_as<float>()[0];
}

const float* vec(const Tensor& t, int64_t n, const char* what) {
  MAGI2_CHECK(t.defined() && t.dtype() == DType::F32 && t.numel() == n, what, ": expected ", n, " f32 values");
  return t.data_as<float>();
}

// Sinkhorn-Knopp on one 4x4 matrix (spec §9.5): column normalisation first,
// then rows; column sums sequential, row sums (x0 + x2) + (x1 + x3) as the
// eager PyTorch reduction the spec pins as the reference order.
void sinkhorn(float m[kStreams][kStreams], int iters, float eps) {
  for (int it = 0; it < iters; ++it) {
    for (int j = 0; j < kStreams; ++j) {
      const float s = ((m[0][j] + m[1][j]) + m[2][j]) + m[3][j];
      for (int i = 0; i < kStreams; ++i) m[i][j] = m[i][j] / (s + eps);
    }
    for (int i = 0; i < kStreams; ++i) {
      const float s = (m[i][0] + m[i][2]) + (m[i][1] + m[i][3]);
      for (int j = 0; j < kStreams; ++j) m[i][j] = m[i][j] / (s + eps);
    }
  }
}

}  // namespace

void mhc_logits(const MhcLogitsParams& p) {
  const int64_t t = p.state.size(0), vw = p.state.size(1);
  check_2d(p.state, t, vw, "mhc_logits.state");
  check_2d(p.logits, t, kLogits, "mhc_logits.logits");
  check_groups(p.groups, t, "mhc_logits");
  MAGI2_CHECK(p.state.dtype() == DType::BF16 && p.logits.dtype() == DType::F32, "mhc_logits: dtypes");
  const float* w = vec(p.norm_w, vw * p.groups.count, "mhc_norm.weight");
  MAGI2_CHECK(p.phi.dtype() == DType::F32 && p.phi.shape() == Shape({vw, kLogits}), "mhc phi: expected [", vw,
              ", 24] f32, got ", shape_str(p.phi.shape()));
  // Phi is stored [in, out]; transpose once so each logit is a contiguous dot.
  std::vector<float> phi_t(static_cast<size_t>(kLogits * vw));
  const float* phi = p.phi.data_as<float>();
  for (int64_t k = 0; k < vw; ++k)
    for (int c = 0; c < kLogits; ++c) phi_t[c * vw + k] = phi[k * kLogits + c];
#pragma omp parallel
  {
    std::vector<float> x(vw);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < t; ++r) {
      load_row_f32(p.state, r, vw, x.data());
      rms_normalize(x.data(), vw, w + static_cast<int64_t>(group_of(p.groups, r)) * vw, p.eps);
      float* out = reinterpret_cast<float*>(row_ptr(p.logits, r));
      for (int c = 0; c < kLogits; ++c) out[c] = dot_f32(x.data(), phi_t.data() + c * vw, vw);
    }
  }
}

void mhc_pre(const MhcPreParams& p) {
  MAGI2_CHECK(p.w != nullptr, "mhc_pre: weights missing");
  const int64_t t = p.state.size(0), vw = p.state.size(1), d = vw / kStreams;
  check_2d(p.state, t, vw, "mhc_pre.state");
  check_2d(p.logits, t, kLogits, "mhc_pre.logits");
  const Tensor& out = mhc_pre_rows(p);  // a, or norm.y (normalised in place below)
  check_2d(out, t, d, p.a.defined() || !p.norm.y.defined() ? "mhc_pre.a" : "mhc_pre.norm.y");
  if (p.h_pre.defined()) check_2d(p.h_pre, t, kStreams, "mhc_pre.h_pre");
  MAGI2_CHECK(p.state.dtype() == DType::BF16 && p.logits.dtype() == DType::F32 && out.dtype() == DType::BF16 &&
                  (!p.h_pre.defined() || p.h_pre.dtype() == DType::F32),
              "mhc_pre: expected bf16 state and a, f32 logits and h_pre");
  const float ac = scalar(p.w->alpha_pre, "mhc_alpha_pre") * p.c;
  const float* b = vec(p.w->bias_pre, kStreams, "mhc_bias_pre");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < t; ++r) {
    const float* l = reinterpret_cast<const float*>(row_ptr(p.logits, r));
    float h[kStreams];
    for (int i = 0; i < kStreams; ++i) h[i] = round_bf16(sigmoid_f32(ac * l[i] + b[i]));
    if (p.h_pre.defined())
      for (int i = 0; i < kStreams; ++i) reinterpret_cast<float*>(row_ptr(p.h_pre, r))[i] = h[i];
    const uint16_t* s = reinterpret_cast<const uint16_t*>(row_ptr(p.state, r));
    uint16_t* a = reinterpret_cast<uint16_t*>(row_ptr(out, r));
    for (int64_t c = 0; c < d; ++c) {
      float acc = 0.f;
      for (int i = 0; i < kStreams; ++i) acc += h[i] * bf16_bits_to_f32(s[i * d + c]);
      a[c] = f32_to_bf16_bits(acc);
    }
  }
  if (p.norm.y.defined()) rms_norm(mhc_pre_norm(p));
}

void mhc_post_res(const MhcPostResParams& p) {
  MAGI2_CHECK(p.w != nullptr, "mhc_post_res: weights missing");
  const int64_t t = p.state.size(0), vw = p.state.size(1), d = vw / kStreams;
  check_2d(p.state, t, vw, "mhc_post_res.state");
  check_2d(p.o, t, d, "mhc_post_res.o");
  check_2d(p.logits, t, kLogits, "mhc_post_res.logits");
  if (p.h_post.defined()) check_2d(p.h_post, t, kStreams, "mhc_post_res.h_post");
  if (p.h_res.defined()) check_2d(p.h_res, t, kStreams * kStreams, "mhc_post_res.h_res");
  MAGI2_CHECK(p.state.dtype() == DType::BF16 && p.o.dtype() == DType::BF16 && p.logits.dtype() == DType::F32 &&
                  (!p.h_post.defined() || p.h_post.dtype() == DType::F32) &&
                  (!p.h_res.defined() || p.h_res.dtype() == DType::F32),
              "mhc_post_res: expected bf16 state and o, f32 logits, h_post and h_res");
  MAGI2_CHECK(!p.ss.defined() || (p.ss.dtype() == DType::F32 && p.ss.numel() == t && p.ss.is_contiguous()),
              "mhc_post_res.ss: expected ", t, " contiguous f32 values");
  check_mhc_next(Device::CPU, p, t, vw);  // before the state changes
  const float ac_post = scalar(p.w->alpha_post, "mhc_alpha_post") * p.c;
  const float ac_res = scalar(p.w->alpha_res, "mhc_alpha_res") * p.c;
  const float* b_post = vec(p.w->bias_post, kStreams, "mhc_bias_post");
  const float* b_res = vec(p.w->bias_res, kStreams * kStreams, "mhc_bias_res");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < t; ++r) {
    const float* l = reinterpret_cast<const float*>(row_ptr(p.logits, r));
    float hp[kStreams];
    for (int i = 0; i < kStreams; ++i) hp[i] = round_bf16(2.0f * sigmoid_f32(ac_post * l[4 + i] + b_post[i]));
    float m[kStreams][kStreams];
    float mx = -INFINITY;
    bool nan = false;
    for (int i = 0; i < kStreams; ++i)
      for (int j = 0; j < kStreams; ++j) {
        m[i][j] = ac_res * l[8 + 4 * i + j] + b_res[4 * i + j];
        nan = nan || std::isnan(m[i][j]);
        mx = std::max(mx, m[i][j]);
      }
    if (nan) mx = NAN;  // amax propagates NaN
    for (int i = 0; i < kStreams; ++i)
      for (int j = 0; j < kStreams; ++j) m[i][j] = std::exp(m[i][j] - mx);
    sinkhorn(m, p.sinkhorn_iters, p.sinkhorn_eps);
    for (int i = 0; i < kStreams; ++i)
      for (int j = 0; j < kStreams; ++j) m[i][j] = round_bf16(m[i][j]);
    if (p.h_post.defined())
      for (int i = 0; i < kStreams; ++i) reinterpret_cast<float*>(row_ptr(p.h_post, r))[i] = hp[i];
    if (p.h_res.defined())
      for (int i = 0; i < kStreams; ++i)
        for (int j = 0; j < kStreams; ++j) reinterpret_cast<float*>(row_ptr(p.h_res, r))[4 * i + j] = m[i][j];
    uint16_t* s = reinterpret_cast<uint16_t*>(row_ptr(p.state, r));
    const uint16_t* o = reinterpret_cast<const uint16_t*>(row_ptr(p.o, r));
    for (int64_t c = 0; c < d; ++c) {
      float old[kStreams];
      for (int j = 0; j < kStreams; ++j) old[j] = bf16_bits_to_f32(s[j * d + c]);
      const float oc = bf16_bits_to_f32(o[c]);
      // Official default (Triton hyper-connect kernel): one fp32 accumulation
      // of the 4-term mix plus the post term, one rounding (spec §12 row 12).
      for (int i = 0; i < kStreams; ++i) {
        float acc = 0.f;
        for (int j = 0; j < kStreams; ++j) acc += m[i][j] * old[j];
        acc += hp[i] * oc;
        s[i * d + c] = f32_to_bf16_bits(acc);
      }
    }
    if (p.ss.defined()) {  // the new row's sum of squares, in column order
      float acc = 0.f;
      for (int64_t c = 0; c < vw; ++c) {
        const float v = bf16_bits_to_f32(s[c]);
        acc += v * v;
      }
      p.ss.data_as<float>()[r] = acc;
    }
  }
  if (p.next.logits.defined()) mhc_logits(mhc_next_logits(p));
}

}  // namespace magi2::cpu
