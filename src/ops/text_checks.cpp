#include "ops/text_checks.h"

#include <string>

#include "core/error.h"
#include "ops/op_checks.h"

namespace magi2 {

namespace {

bool is_float(DType t) { return t == DType::BF16 || t == DType::F32; }

void check_float(const Tensor& t, DType dt, const char* what) {
  MAGI2_CHECK(t.dtype() == dt && is_float(dt), what, ": expected all operands bf16 or all f32, got ",
              dtype_name(t.dtype()));
}

// A small f32 parameter vector of n values on `device` (contiguous).
void check_f32_vector(const Tensor& t, int64_t n, Device device, const char* what) {
  MAGI2_CHECK(t.defined() && t.device() == device && t.is_contiguous() && t.dtype() == DType::F32 &&
                  t.numel() == n,
              what, ": expected ", n, " contiguous f32 values on the ", device == Device::CUDA ? "GPU" : "CPU",
              ", got ", t.defined() ? shape_str(t.shape()) : std::string("none"));
}

}  // namespace

Conv1dCausalDims check_causal_conv1d(const CausalConv1dParams& p, Device device) {
  MAGI2_CHECK(p.x.defined() && p.x.dim() == 2, "causal_conv1d.x: expected a 2-D tensor");
  const int64_t rows = p.x.size(0), ch = p.x.size(1);
  check_2d_on(device, p.x, rows, ch, "causal_conv1d.x");
  check_2d_on(device, p.y, rows, ch, "causal_conv1d.y");
  const DType dt = p.x.dtype();
  MAGI2_CHECK(is_float(dt) && p.y.dtype() == dt && p.w.dtype() == dt,
              "causal_conv1d: x, w and y must be all bf16 or all f32");
  MAGI2_CHECK(p.w.device() == device && p.w.is_contiguous() && p.w.dim() == 2 && p.w.size(0) == ch,
              "causal_conv1d.w: expected [", ch, ", K], got ", shape_str(p.w.shape()));
  return {rows, ch, p.w.size(1)};
}

DeltaRuleDims check_gated_delta_rule(const GatedDeltaRuleParams& p, Device device) {
  const int64_t hk = p.num_k_heads, hv = p.num_v_heads;
  MAGI2_CHECK(hk >= 1 && hv >= 1 && hv % hk == 0, "gated_delta_rule: ", hv, " value heads do not group over ", hk,
              " key heads");
  MAGI2_CHECK(p.q.defined() && p.v.defined() && p.q.dim() == 2 && p.q.size(1) % hk == 0 && p.v.dim() == 2 &&
                  p.v.size(1) % hv == 0,
              "gated_delta_rule: q/v widths do not split into heads");
  const int64_t len = p.q.size(0), dk = p.q.size(1) / hk, dv = p.v.size(1) / hv;
  check_2d_on(device, p.q, len, hk * dk, "gated_delta_rule.q");
  check_2d_on(device, p.k, len, hk * dk, "gated_delta_rule.k");
  check_2d_on(device, p.v, len, hv * dv, "gated_delta_rule.v");
  check_2d_on(device, p.a, len, hv, "gated_delta_rule.a");
  check_2d_on(device, p.b, len, hv, "gated_delta_rule.b");
  check_2d_on(device, p.o, len, hv * dv, "gated_delta_rule.o");
  const DType dt = p.q.dtype();
  for (const Tensor* x : {&p.k, &p.v, &p.a, &p.b, &p.o})
    MAGI2_CHECK(x->dtype() == dt && is_float(dt), "gated_delta_rule: q, k, v, a, b, o must be all bf16 or all f32");
  check_f32_vector(p.a_log, hv, device, "gated_delta_rule.A_log");
  check_f32_vector(p.dt_bias, hv, device, "gated_delta_rule.dt_bias");
  MAGI2_CHECK(p.chunk_size >= 1, "gated_delta_rule: chunk_size must be >= 1");
  return {len, hk, hv, dk, dv};
}

int64_t check_gated_rms_norm(const GatedRmsNormParams& p, Device device) {
  MAGI2_CHECK(p.x.defined() && p.x.dim() == 2, "gated_rms_norm.x: expected a 2-D tensor");
  const int64_t rows = p.x.size(0), cols = p.x.size(1);
  MAGI2_CHECK(p.heads >= 1 && cols % p.heads == 0, "gated_rms_norm: ", cols, " columns do not split into ", p.heads,
              " heads");
  const int64_t d = cols / p.heads;
  check_2d_on(device, p.x, rows, cols, "gated_rms_norm.x");
  check_2d_on(device, p.z, rows, cols, "gated_rms_norm.z");
  check_2d_on(device, p.y, rows, cols, "gated_rms_norm.y");
  const DType dt = p.x.dtype();
  check_float(p.x, dt, "gated_rms_norm.x");
  check_float(p.z, dt, "gated_rms_norm.z");
  check_float(p.y, dt, "gated_rms_norm.y");
  check_f32_vector(p.w, d, device, "gated_rms_norm.w");
  return d;
}

RotaryDims check_rotary(const RotaryParams& p, Device device) {
  MAGI2_CHECK(p.x.defined() && p.x.dim() == 2, "rotary.x: expected a 2-D tensor");
  const int64_t rows = p.x.size(0), cols = p.x.size(1);
  MAGI2_CHECK(p.heads >= 1 && cols % p.heads == 0, "rotary: ", cols, " columns do not split into ", p.heads, " heads");
  const int64_t hd = cols / p.heads, rot = p.rotary_dim, half = rot / 2;
  check_2d_on(device, p.x, rows, cols, "rotary.x");
  MAGI2_CHECK(is_float(p.x.dtype()), "rotary.x: expected bf16 or f32");
  MAGI2_CHECK(rot >= 2 && rot % 2 == 0 && rot <= hd, "rotary: rotary_dim ", rot, " must be even and <= head_dim ", hd);
  check_f32_vector(p.inv_freq, half, device, "rotary.inv_freq");
  MAGI2_CHECK(p.positions == nullptr || static_cast<int64_t>(p.positions->size()) == rows, "rotary: ",
              p.positions ? p.positions->size() : 0, " positions for ", rows, " rows");
  return {rows, hd, half};
}

CausalAttentionDims check_causal_attention(const CausalAttentionParams& p, Device device) {
  const int64_t h = p.heads, hkv = p.kv_heads;
  MAGI2_CHECK(h >= 1 && hkv >= 1 && h % hkv == 0, "causal_attention: ", h, " query heads do not group over ", hkv,
              " key/value heads");
  MAGI2_CHECK(p.q.defined() && p.q.dim() == 2 && p.q.size(1) % h == 0,
              "causal_attention.q: expected [T, heads * head_dim]");
  const int64_t t = p.q.size(0), hd = p.q.size(1) / h;
  check_2d_on(device, p.q, t, h * hd, "causal_attention.q");
  check_2d_on(device, p.k, t, hkv * hd, "causal_attention.k");
  check_2d_on(device, p.v, t, hkv * hd, "causal_attention.v");
  check_2d_on(device, p.o, t, h * hd, "causal_attention.o");
  const DType dt = p.q.dtype();
  for (const Tensor* x : {&p.k, &p.v, &p.o})
    MAGI2_CHECK(x->dtype() == dt && is_float(dt), "causal_attention: q, k, v, o must be all bf16 or all f32");
  return {t, h, hkv, hd};
}

void check_gated_product(const Tensor& x, const Tensor& g, const Tensor& out, const char* op, Device device) {
  MAGI2_CHECK(out.defined() && out.dim() == 2, op, ".out: expected a 2-D tensor");
  const int64_t rows = out.size(0), cols = out.size(1);
  const std::string n(op);
  check_2d_on(device, x, rows, cols, (n + ".x").c_str());
  check_2d_on(device, g, rows, cols, (n + ".g").c_str());
  check_2d_on(device, out, rows, cols, (n + ".out").c_str());
  const DType dt = out.dtype();
  check_float(x, dt, (n + ".x").c_str());
  check_float(g, dt, (n + ".g").c_str());
  check_float(out, dt, (n + ".out").c_str());
}

}  // namespace magi2
