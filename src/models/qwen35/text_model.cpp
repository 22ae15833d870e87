#include "models/qwen35/text_model.h"

#include <cmath>

#include "core/error.h"

namespace magi2::qwen35 {

TextModel::TextModel(const TextConfig& cfg, const TextWeights& w, Backend& be, int output_layer,
                     LayerOffload* offload)
    : cfg_(cfg), w_(w), be_(be), output_layer_(output_layer), offload_(offload) {
  MAGI2_CHECK(output_layer >= 0 && output_layer < w.num_bound_layers, "text model: output layer ", output_layer,
              " is not among the ", w.num_bound_layers, " bound layers");
  MAGI2_CHECK(!offload || offload->num_layers() > static_cast<size_t>(output_layer), "text model: the layer offload "
              "holds ", offload ? offload->num_layers() : 0, " layers, the forward runs ", output_layer + 1);
  // Qwen3_5TextRotaryEmbedding default init, in fp32: base ** (arange(0, dim, 2) / dim).
  const int rot = cfg.rotary_dim();
  std::vector<float> inv(static_cast<size_t>(rot / 2));
  const float base = static_cast<float>(cfg.rope_theta);
  for (int i = 0; i < rot / 2; ++i) inv[i] = 1.0f / std::pow(base, static_cast<float>(2 * i) / static_cast<float>(rot));
  inv_freq_ = to_backend(be, Tensor::from_f32({rot / 2}, inv));
}

Tensor TextModel::forward(const std::vector<int64_t>& ids, const TextTrace& observer) const {
  const int64_t len = static_cast<int64_t>(ids.size()), d = cfg_.hidden_size;
  MAGI2_CHECK(len >= 1, "text encoder: the prompt has no tokens (the official encoder fails on an empty prompt)");
  std::vector<int32_t> rows(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    MAGI2_CHECK(ids[i] >= 0 && ids[i] < cfg_.vocab_size, "text encoder: token id ", ids[i],
                " is outside the vocabulary of ", cfg_.vocab_size);
    rows[i] = static_cast<int32_t>(ids[i]);
  }
  // Observers read host tensors: intermediates on a device are copied down (tracing only).
  TextTrace trace = observer;
  if (observer && be_.device() != Device::CPU)
    trace = [&](const std::string& name, int layer, const Tensor& t) { observer(name, layer, to_host(be_, t)); };
  auto emit = [&](const char* name, int layer, const Tensor& t) {
    if (trace) trace(name, layer, t);
  };
  const DType dt = w_.dtype;
  // Embedding rows are gathered from the stored bf16 table (widened in fp32 mode).
  const Tensor index = to_backend(be_, Tensor::from_i32({len}, rows));
  Tensor h = be_.alloc({len, d}, dt);
  if (dt == DType::BF16) {
    be_.gather_rows({.src = w_.embed_tokens, .dst = h, .index = index});
  } else {
    Tensor e = be_.alloc({len, d}, DType::BF16);
    be_.gather_rows({.src = w_.embed_tokens, .dst = e, .index = index});
    be_.cast({.src = e, .dst = h});
  }
  emit("embed_tokens", -1, h);
  Tensor xn = be_.alloc({len, d}, dt), mix = be_.alloc({len, d}, dt);
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  if (offload_) offload_->begin();  // layers 0 and 1 on their way into the slots
  for (int l = 0; l <= output_layer_; ++l) {
    const TextLayerWeights& L = w_.layers[l];
    if (offload_) offload_->before_layer(l);
    be_.mark("text.norm_add");  // profiling regions (Backend::mark; no-ops unless profiling)
    be_.rms_norm({.x = h, .w = L.input_layernorm, .y = xn, .groups = Groups::single(len), .eps = eps});
    emit("input_layernorm", l, xn);
    be_.mark(L.full_attention ? "text.attention" : "text.delta_net");
    if (L.full_attention)
      full_attention(L, xn, mix, l, trace);
    else
      linear_attention(L, xn, mix, l, trace);
    be_.mark("text.norm_add");
    be_.add({.a = h, .b = mix, .out = h});
    be_.rms_norm({.x = h, .w = L.post_attention_layernorm, .y = xn, .groups = Groups::single(len), .eps = eps});
    be_.mark("text.mlp");
    mlp(L, xn, mix);
    emit("mlp_out", l, mix);
    be_.mark("text.norm_add");
    be_.add({.a = h, .b = mix, .out = h});
    if (offload_) offload_->after_layer(l);  // layer l + 2 into the slot once layer l's ops are done
    emit("layer_out", l, h);
  }
  return h;
}

// Qwen3_5GatedDeltaNet: projections, causal conv + SiLU, gated delta rule,
// gated RMSNorm, out_proj.
void TextModel::linear_attention(const TextLayerWeights& L, const Tensor& x, const Tensor& out, int layer,
                                 const TextTrace& trace) const {
  const int64_t len = x.size(0), kd = cfg_.key_dim(), vd = cfg_.value_dim(), hv = cfg_.linear_num_value_heads;
  const DType dt = w_.dtype;
  const Groups one = Groups::single(len);
  Tensor qkv = be_.alloc({len, cfg_.conv_dim()}, dt);  // [L, q | k | v]
  Tensor z = be_.alloc({len, vd}, dt), b = be_.alloc({len, hv}, dt), a = be_.alloc({len, hv}, dt);
  be_.linear({.x = x, .w = L.in_proj_qkv, .y = qkv, .groups = one});
  be_.linear({.x = x, .w = L.in_proj_z, .y = z, .groups = one});
  be_.linear({.x = x, .w = L.in_proj_b, .y = b, .groups = one});
  be_.linear({.x = x, .w = L.in_proj_a, .y = a, .groups = one});
  Tensor conv = be_.alloc({len, cfg_.conv_dim()}, dt);
  be_.causal_conv1d({.x = qkv, .w = L.conv1d, .y = conv, .silu = true});
  Tensor core = be_.alloc({len, vd}, dt);
  be_.gated_delta_rule({.q = conv.slice_cols(0, kd),
                        .k = conv.slice_cols(kd, 2 * kd),
                        .v = conv.slice_cols(2 * kd, 2 * kd + vd),
                        .a = a,
                        .b = b,
                        .a_log = L.a_log,
                        .dt_bias = L.dt_bias,
                        .o = core,
                        .num_k_heads = cfg_.linear_num_key_heads,
                        .num_v_heads = cfg_.linear_num_value_heads});
  Tensor gated = be_.alloc({len, vd}, dt);
  be_.gated_rms_norm(
      {.x = core, .z = z, .w = L.gated_norm, .y = gated, .heads = hv, .eps = static_cast<float>(cfg_.rms_norm_eps)});
  be_.linear({.x = gated, .w = L.out_proj, .y = out, .groups = one});
  if (trace) {
    trace("in_proj_qkv", layer, qkv);
    trace("in_proj_z", layer, z);
    trace("in_proj_b", layer, b);
    trace("in_proj_a", layer, a);
    trace("conv1d", layer, conv);
    trace("core_attn_out", layer, core.reshape({len * hv, cfg_.linear_value_head_dim}));
    trace("gated_norm_out", layer, gated.reshape({len * hv, cfg_.linear_value_head_dim}));
    trace("out_proj", layer, out);
  }
}

// Qwen3_5Attention: q_proj emits query and gate per head; q/k RMSNorm (1 + w)
// per head; partial rotary; causal GQA; output times sigmoid(gate); o_proj.
void TextModel::full_attention(const TextLayerWeights& L, const Tensor& x, const Tensor& out, int layer,
                               const TextTrace& trace) const {
  const int64_t len = x.size(0), h = cfg_.num_attention_heads, hkv = cfg_.num_key_value_heads, hd = cfg_.head_dim;
  const DType dt = w_.dtype;
  const Groups one = Groups::single(len);
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  Tensor qg = be_.alloc({len, h * 2 * hd}, dt);
  be_.linear({.x = x, .w = L.q_proj, .y = qg, .groups = one});
  const Tensor per_head = qg.reshape({len * h, 2 * hd});  // rows (token, head): [query | gate]
  Tensor q = be_.alloc({len, h * hd}, dt);
  be_.rms_norm({.x = per_head.slice_cols(0, hd),
                .w = L.q_norm,
                .y = q.reshape({len * h, hd}),
                .groups = Groups::single(len * h),
                .eps = eps});
  Tensor k = be_.alloc({len, hkv * hd}, dt), v = be_.alloc({len, hkv * hd}, dt);
  Tensor kn = be_.alloc({len, hkv * hd}, dt);
  be_.linear({.x = x, .w = L.k_proj, .y = k, .groups = one});
  be_.linear({.x = x, .w = L.v_proj, .y = v, .groups = one});
  be_.rms_norm({.x = k, .w = L.k_norm, .y = kn, .groups = one, .heads = hkv, .eps = eps});
  be_.rotary({.x = q, .inv_freq = inv_freq_, .heads = h, .rotary_dim = cfg_.rotary_dim()});
  be_.rotary({.x = kn, .inv_freq = inv_freq_, .heads = hkv, .rotary_dim = cfg_.rotary_dim()});
  Tensor o = be_.alloc({len, h * hd}, dt);
  be_.causal_attention({.q = q,
                        .k = kn,
                        .v = v,
                        .o = o,
                        .heads = h,
                        .kv_heads = hkv,
                        .scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)))});
  const Tensor o_rows = o.reshape({len * h, hd});
  be_.sigmoid_mul({.x = o_rows, .g = per_head.slice_cols(hd, 2 * hd), .out = o_rows});
  be_.linear({.x = o, .w = L.o_proj, .y = out, .groups = one});
  if (trace) {
    trace("q_proj", layer, qg);
    trace("k_proj", layer, k);
    trace("v_proj", layer, v);
    trace("o_proj_in", layer, o);
    trace("o_proj_out", layer, out);
  }
}

// Qwen3_5MLP: down_proj(silu(gate_proj(x)) * up_proj(x)).
void TextModel::mlp(const TextLayerWeights& L, const Tensor& x, const Tensor& out) const {
  const int64_t len = x.size(0), in = cfg_.intermediate_size;
  const DType dt = w_.dtype;
  const Groups one = Groups::single(len);
  Tensor g = be_.alloc({len, in}, dt), u = be_.alloc({len, in}, dt);
  be_.linear({.x = x, .w = L.gate_proj, .y = g, .groups = one});
  be_.linear({.x = x, .w = L.up_proj, .y = u, .groups = one});
  be_.silu_mul({.gate = g, .up = u, .out = g});
  be_.linear({.x = g, .w = L.down_proj, .y = out, .groups = one});
}

}  // namespace magi2::qwen35
