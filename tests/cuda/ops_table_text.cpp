// The Qwen3.5 text encoder's rows of the backend op table (ops_table.h): the
// seven text ops at the 27B release widths (spec magi2-pipeline.md §2.1:
// hidden 5120, Gated DeltaNet 16 key heads / 48 value heads x 128, conv
// kernel 4, full attention 24 / 4 heads x 256 with rotary on 64 dims, MLP
// 17408) on 1024-2048 tokens where the CPU reference stays cheap, plus the
// tiny golden widths (heads of 16 / 32) in fp32 and odd lengths. Operands are
// laid out as TextModel passes them (column slices of the conv output and of
// q_proj's per-head rows). Tolerances: docs/cuda-stages.md (the text encoder's parity
// table); "exact(3)": the exp-based ops, a handful of elements allowed as for the DiT's gate.
#include <cmath>
#include <string>

#include "core/error.h"
#include "cuda/backend_cuda.h"
#include "cuda/text_ops.h"
#include "ops_table.h"

namespace magi2::test {

namespace {

constexpr DType kBf16 = DType::BF16;
constexpr DType kF32 = DType::F32;

const char* dt_name(DType dt) { return dt == kBf16 ? "bf16" : "f32"; }

OpEntry conv_entry(int64_t len, int64_t ch, bool silu, DType dt) {
  const std::string s = str_cat(len, "x", ch, " ", dt_name(dt), ", kernel 4", silu ? " + SiLU" : "");
  return {"causal_conv1d", s, exact(3), 0, [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            const CausalConv1dParams p{.x = b.in(b.uniform({len, ch}, dt, -3.f, 3.f)),
                                       .w = b.in(b.uniform({ch, 4}, dt, -0.6f, 0.6f)),
                                       .y = b.out({len, ch}, dt), .silu = silu};
            return b.done([&be, p] { be.causal_conv1d(p); });
          }};
}

// q, k, v are column slices of one [L, 2 Hk dk + Hv dv] buffer, as the model's conv output.
OpEntry delta_entry(int64_t len, int hk, int hv, int64_t dk, int64_t dv, DType dt) {
  const std::string s = str_cat(len, " tokens, ", hk, "/", hv, " heads x ", dk, "/", dv, " ", dt_name(dt),
                                ", q/k/v column slices");
  // Recurrent (CUDA) vs chunked UT form (CPU): fp32 rounding of the state only.
  const Tolerance tol = dt == kBf16 ? rel_rms(2e-3, 2e-2, true) : rel_rms(2e-4, 2e-3, true);
  const double flops = 6.0 * static_cast<double>(len) * hv * dk * dv;
  return {"gated_delta_rule", s, tol, flops, [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            const int64_t kd = hk * dk, vd = hv * dv;
            Tensor qkv = b.in(b.uniform({len, 2 * kd + vd}, dt, -1.5f, 1.5f));
            // Decays exp(g) from ~0.15 to ~1: short and long memories in one call.
            const GatedDeltaRuleParams p{.q = qkv.slice_cols(0, kd), .k = qkv.slice_cols(kd, 2 * kd),
                                         .v = qkv.slice_cols(2 * kd, 2 * kd + vd),
                                         .a = b.in(b.uniform({len, hv}, dt, -6.f, 0.f)),
                                         .b = b.in(b.uniform({len, hv}, dt, -3.f, 3.f)),
                                         .a_log = b.in(b.uniform({hv}, kF32, -2.f, 1.f)),
                                         .dt_bias = b.in(b.uniform({hv}, kF32, -2.f, 0.f)),
                                         .o = b.out({len, vd}, dt), .num_k_heads = hk, .num_v_heads = hv};
            return b.done([&be, p] { be.gated_delta_rule(p); });
          }};
}

OpEntry gated_norm_entry(int64_t rows, int64_t heads, int64_t d, DType dt) {
  const std::string s = str_cat(rows, "x", heads, "x", d, " ", dt_name(dt));
  return {"gated_rms_norm", s, exact(3), 0, [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            const GatedRmsNormParams p{.x = b.in(b.uniform({rows, heads * d}, dt, -2.f, 2.f)),
                                       .z = b.in(b.uniform({rows, heads * d}, dt, -5.f, 5.f)),
                                       .w = b.in(b.uniform({d}, kF32, 0.5f, 1.5f)),
                                       .y = b.out({rows, heads * d}, dt), .heads = heads};
            return b.done([&be, p] { be.gated_rms_norm(p); });
          }};
}

// Positions up to `rows`: angles to ~2000 rad, where the cos/sin rounding shows.
OpEntry rotary_entry(int64_t rows, int64_t heads, int64_t hd, int64_t rot, DType dt) {
  const std::string s = str_cat(rows, "x", heads, "x", hd, " ", dt_name(dt), ", rotary ", rot, ", in place");
  // cos/sin: double rounded to fp32 on CUDA vs glibc cosf/sinf (1 fp32 ulp apart at times). On the bf16
  // path that rarely flips the bf16 cos/sin, and the flipped product (up to 2^-8 |x|) may land on an output
  // that cancels to ~0: a bound on the error, not on ulps of the output.
  const Tolerance tol = dt == kBf16 ? rel_rms(1e-3, 1e-2, true) : rel_rms(1e-6, 1e-5, true);
  return {"rotary", s, tol, 0, [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            std::vector<float> inv(static_cast<size_t>(rot / 2));
            for (int64_t i = 0; i < rot / 2; ++i)
              inv[i] = 1.0f / std::pow(1e7f, static_cast<float>(2 * i) / static_cast<float>(rot));
            const RotaryParams p{.x = b.inout(b.uniform({rows, heads * hd}, dt, -3.f, 3.f)),
                                 .inv_freq = b.in(Tensor::from_f32({rot / 2}, inv)), .heads = heads,
                                 .rotary_dim = rot};
            return b.done([&be, p] { be.rotary(p); });
          }};
}

// own: our kernel (the CPU's algorithm step for step: glibc-exact exp, dot_f32
// order) even where the backend takes cuDNN SDPA (bf16: P rounded to bf16 at
// cuDNN's points, the DiT attention's bound).
OpEntry causal_entry(int64_t t, int64_t h, int64_t hkv, int64_t hd, DType dt, bool own) {
  const std::string s = str_cat(t, " tokens, ", h, "/", hkv, " heads x ", hd, " ", dt_name(dt),
                                own ? ", our kernel" : (dt == kBf16 ? ", cuDNN" : ""));
  const double flops = 2.0 * static_cast<double>(h * hd) * static_cast<double>(t) * static_cast<double>(t + 1);
  const bool cudnn = !own && dt == kBf16;  // a build without cuDNN runs our kernel: within the bound too
  return {"causal_attention", s, cudnn ? rel_rms(5e-3, 0.05) : exact(3), flops, [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            const CausalAttentionParams p{.q = b.in(b.uniform({t, h * hd}, dt, -3.f, 3.f)),
                                          .k = b.in(b.uniform({t, hkv * hd}, dt, -1.7f, 1.7f)),
                                          .v = b.in(b.uniform({t, hkv * hd}, dt, -1.7f, 1.7f)),
                                          .o = b.out({t, h * hd}, dt), .heads = h, .kv_heads = hkv,
                                          .scale = 1.f / std::sqrt(static_cast<float>(hd))};
            return b.done([&be, p, own] {
              if (own && be.device() == Device::CUDA)
                cuda::causal_attention(p, static_cast<cudaStream_t>(cuda_stream_of(be)), true);
              else
                be.causal_attention(p);
            });
          }};
}

// The attention output gate as TextModel calls it: o rows [L*H, hd] in place, g
// the gate half of q_proj's per-head rows [L*H, 2 hd].
OpEntry sigmoid_mul_entry(int64_t len, int64_t h, int64_t hd, DType dt) {
  const std::string s = str_cat(len, "x", h, "x", hd, " ", dt_name(dt), ", in place, g a column slice");
  return {"sigmoid_mul", s, exact(3), 0, [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            Tensor o = b.inout(b.uniform({len * h, hd}, dt, -3.f, 3.f));
            Tensor qg = b.in(b.uniform({len * h, 2 * hd}, dt, -6.f, 6.f));
            const SigmoidMulParams p{.x = o, .g = qg.slice_cols(hd, 2 * hd), .out = o};
            return b.done([&be, p] { be.sigmoid_mul(p); });
          }};
}

OpEntry silu_mul_entry(int64_t rows, int64_t cols, DType dt) {
  const std::string s = str_cat(rows, "x", cols, " ", dt_name(dt), ", out = gate in place");
  return {"silu_mul", s, exact(3), 0, [=](Backend& be, uint64_t seed) {
            CaseBuilder b(be, seed);
            Tensor g = b.inout(b.uniform({rows, cols}, dt, -8.f, 8.f));
            const SiluMulParams p{.gate = g, .up = b.in(b.uniform({rows, cols}, dt, -3.f, 3.f)), .out = g};
            return b.done([&be, p] { be.silu_mul(p); });
          }};
}

}  // namespace

std::vector<OpEntry> text_encoder_op_entries() {
  std::vector<OpEntry> t;
  t.push_back(conv_entry(2048, 10240, true, kBf16));
  t.push_back(conv_entry(333, 160, false, kF32));
  t.push_back(conv_entry(333, 160, true, kF32));
  t.push_back(delta_entry(1024, 16, 48, 128, 128, kBf16));
  t.push_back(delta_entry(333, 2, 6, 16, 16, kBf16));
  t.push_back(delta_entry(333, 2, 6, 16, 16, kF32));
  t.push_back(delta_entry(200, 1, 2, 64, 40, kF32));  // dv not a multiple of 32
  t.push_back(gated_norm_entry(2048, 48, 128, kBf16));
  t.push_back(gated_norm_entry(333, 6, 16, kF32));
  t.push_back(rotary_entry(2048, 24, 256, 64, kBf16));
  t.push_back(rotary_entry(2048, 4, 256, 64, kBf16));
  t.push_back(rotary_entry(333, 4, 32, 8, kF32));
  for (const bool own : {false, true}) {
    t.push_back(causal_entry(1024, 24, 4, 256, kBf16, own));
    t.push_back(causal_entry(700, 8, 2, 128, kBf16, own));
  }
  t.push_back(causal_entry(333, 4, 2, 32, kF32, false));
  t.push_back(sigmoid_mul_entry(2048, 24, 256, kBf16));
  t.push_back(sigmoid_mul_entry(333, 4, 32, kF32));
  t.push_back(silu_mul_entry(2048, 17408, kBf16));
  t.push_back(silu_mul_entry(333, 160, kF32));
  return t;
}

}  // namespace magi2::test
