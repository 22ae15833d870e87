#include "models/qwen35/text_weights.h"

#include <functional>
#include <map>
#include <sstream>

#include "core/error.h"
#include "core/mismatch_report.h"

namespace magi2::qwen35 {

namespace {

enum class Kind { Linear, Gain, Raw };  // Linear: compute dtype; Gain/Raw: f32 copy (Raw keeps its shape)

using Visit = std::function<void(const std::string& name, const Shape& shape, Kind kind, int layer, Tensor* dst)>;

void visit_text_tensors(const TextConfig& c, TextWeights* w, const Visit& f) {
  const int64_t d = c.hidden_size, in = c.intermediate_size, hd = c.head_dim;
  const int64_t h = c.num_attention_heads, hkv = c.num_key_value_heads, hv = c.linear_num_value_heads;
  const int64_t dv = c.linear_value_head_dim;
  f("embed_tokens.weight", {c.vocab_size, d}, Kind::Raw, -1, w ? &w->embed_tokens : nullptr);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    TextLayerWeights* L = w ? &w->layers[l] : nullptr;
    auto q = [&](Tensor TextLayerWeights::*m) { return L ? &(L->*m) : nullptr; };
    const std::string p = "layers." + std::to_string(l) + ".";
    f(p + "input_layernorm.weight", {d}, Kind::Gain, l, q(&TextLayerWeights::input_layernorm));
    if (c.full_attention[l]) {
      const std::string a = p + "self_attn.";
      f(a + "q_proj.weight", {h * 2 * hd, d}, Kind::Linear, l, q(&TextLayerWeights::q_proj));
      f(a + "k_proj.weight", {hkv * hd, d}, Kind::Linear, l, q(&TextLayerWeights::k_proj));
      f(a + "v_proj.weight", {hkv * hd, d}, Kind::Linear, l, q(&TextLayerWeights::v_proj));
      f(a + "o_proj.weight", {d, h * hd}, Kind::Linear, l, q(&TextLayerWeights::o_proj));
      f(a + "q_norm.weight", {hd}, Kind::Gain, l, q(&TextLayerWeights::q_norm));
      f(a + "k_norm.weight", {hd}, Kind::Gain, l, q(&TextLayerWeights::k_norm));
    } else {
      const std::string a = p + "linear_attn.";
      f(a + "in_proj_qkv.weight", {c.conv_dim(), d}, Kind::Linear, l, q(&TextLayerWeights::in_proj_qkv));
      f(a + "in_proj_z.weight", {c.value_dim(), d}, Kind::Linear, l, q(&TextLayerWeights::in_proj_z));
      f(a + "in_proj_b.weight", {hv, d}, Kind::Linear, l, q(&TextLayerWeights::in_proj_b));
      f(a + "in_proj_a.weight", {hv, d}, Kind::Linear, l, q(&TextLayerWeights::in_proj_a));
      f(a + "conv1d.weight", {c.conv_dim(), 1, c.linear_conv_kernel_dim}, Kind::Linear, l,
        q(&TextLayerWeights::conv1d));
      f(a + "A_log", {hv}, Kind::Gain, l, q(&TextLayerWeights::a_log));
      f(a + "dt_bias", {hv}, Kind::Gain, l, q(&TextLayerWeights::dt_bias));
      f(a + "norm.weight", {dv}, Kind::Gain, l, q(&TextLayerWeights::gated_norm));
      f(a + "out_proj.weight", {d, c.value_dim()}, Kind::Linear, l, q(&TextLayerWeights::out_proj));
    }
    f(p + "post_attention_layernorm.weight", {d}, Kind::Gain, l, q(&TextLayerWeights::post_attention_layernorm));
    f(p + "mlp.gate_proj.weight", {in, d}, Kind::Linear, l, q(&TextLayerWeights::gate_proj));
    f(p + "mlp.up_proj.weight", {in, d}, Kind::Linear, l, q(&TextLayerWeights::up_proj));
    f(p + "mlp.down_proj.weight", {d, in}, Kind::Linear, l, q(&TextLayerWeights::down_proj));
  }
  f("norm.weight", {d}, Kind::Gain, -1, w ? &w->norm : nullptr);
}

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

// Weights of `cfg` with no tensors yet: the dtype, the layer kinds, how many layers will be bound.
TextWeights unbound(const TextConfig& cfg, DType dtype, int num_layers) {
  MAGI2_CHECK(dtype == DType::BF16 || dtype == DType::F32, "text encoder: compute dtype must be bf16 or f32");
  TextWeights w;
  w.dtype = dtype;
  w.layers.resize(cfg.num_hidden_layers);
  w.num_bound_layers = std::min(num_layers, cfg.num_hidden_layers);
  for (int l = 0; l < cfg.num_hidden_layers; ++l) w.layers[l].full_attention = cfg.full_attention[l];
  return w;
}

}  // namespace

std::vector<TextTensorSpec> text_tensor_specs(const TextConfig& cfg) {
  std::vector<TextTensorSpec> out;
  visit_text_tensors(cfg, nullptr, [&](const std::string& n, const Shape& s, Kind, int, Tensor*) {
    out.push_back({n, s});
  });
  return out;
}

TextWeights TextWeights::bind(const Checkpoint& ckpt, const TextConfig& cfg, DType dtype, int num_layers_needed) {
  TextWeights w = unbound(cfg, dtype, num_layers_needed);
  const std::string vlm = "model.language_model.";
  if (ckpt.contains(vlm + "embed_tokens.weight"))
    w.prefix = vlm;
  else if (ckpt.contains("model.embed_tokens.weight"))
    w.prefix = "model.";  // *ForCausalLM layout
  std::map<std::string, bool> used;
  std::vector<std::string> missing, wrong;
  visit_text_tensors(cfg, &w, [&](const std::string& name, const Shape& shape, Kind kind, int layer, Tensor* dst) {
    const std::string raw = w.prefix + name;
    if (!ckpt.contains(raw)) {
      missing.push_back(raw);
      return;
    }
    used[raw] = true;
    const SafetensorsEntry& e = ckpt.entry(raw);
    if (e.shape != shape) {
      wrong.push_back(str_cat(raw, " (expected ", shape_str(shape), ", got ", shape_str(e.shape), ")"));
      return;
    }
    if (e.dtype != DType::BF16 && e.dtype != DType::F16 && e.dtype != DType::F32) {
      wrong.push_back(str_cat(raw, " (dtype ", dtype_name(e.dtype), " is not a float type)"));
      return;
    }
    Tensor t = ckpt.tensor(raw);
    // The official encoder loads with torch_dtype=bfloat16: a non-bf16 tensor is
    // rounded to bf16 once (a converted copy replaces the mmap'd view); the fp32
    // reference mode keeps f32 tensors as stored.
    const bool keep_f32 = dtype == DType::F32 && e.dtype == DType::F32;
    if (e.dtype != DType::BF16 && !keep_f32) t = t.to(DType::BF16);
    if (kind == Kind::Raw) {
      *dst = t.dtype() == DType::BF16 ? t : t.to(DType::BF16);  // gathered as bf16 rows
    } else if (kind == Kind::Gain) {
      *dst = t.to(DType::F32);  // tiny: norm gains and per-head scalars, exact widening
    } else {
      if (shape.size() == 3) t = t.reshape({shape[0], shape[2]});  // conv1d [C, 1, K] -> [C, K]
      const bool needed = layer < w.num_bound_layers;
      *dst = (dtype == DType::F32 && needed && t.dtype() != DType::F32) ? t.to(DType::F32) : t;
    }
  });
  std::vector<std::string> unexpected;
  for (const auto& raw : ckpt.names()) {
    if (used.count(raw)) continue;
    const bool ignored =
        !w.prefix.empty() && (raw == "lm_head.weight" || starts_with(raw, "mtp.") || starts_with(raw, "model.visual."));
    if (ignored)
      w.num_ignored += 1;
    else
      unexpected.push_back(raw);
  }
  throw_if_mismatch(
      str_cat("text encoder checkpoint '", ckpt.path(), "' does not match its config '", cfg.source, "':"), missing,
      unexpected, wrong);
  return w;
}

TextWeights TextWeights::generate(const TextConfig& cfg, DType dtype, int num_layers,
                                  const std::function<Tensor(const std::string&, const Shape&, DType)>& make) {
  TextWeights w = unbound(cfg, dtype, num_layers);
  visit_text_tensors(cfg, &w, [&](const std::string& name, const Shape& shape, Kind kind, int layer, Tensor* dst) {
    if (layer >= w.num_bound_layers) return;
    if (kind == Kind::Raw)
      *dst = make(name, shape, DType::BF16);
    else if (kind == Kind::Gain)
      *dst = make(name, shape, DType::F32);
    else
      *dst = make(name, shape.size() == 3 ? Shape{shape[0], shape[2]} : shape, dtype);
  });
  return w;
}

namespace {

// to_backend's upload of the tensors `pick` selects (bound, defined, not yet on the device).
void upload(const TextConfig& cfg, Backend& be, TextWeights& out, const std::function<bool(int layer)>& pick,
            const std::function<void(size_t, size_t)>& progress) {
  std::vector<CopyParams> copies;
  visit_text_tensors(cfg, &out, [&](const std::string& name, const Shape&, Kind, int layer, Tensor* t) {
    if (layer >= out.num_bound_layers || !pick(layer) || !t->defined() || t->device() == be.device()) return;
    const Tensor src = t->is_contiguous() ? *t : t->clone();
    Tensor d;
    try {
      d = be.alloc(src.shape(), src.dtype());
    } catch (const Error& e) {
      throw Error(str_cat("text encoder weights: cannot place ", name, " ", shape_str(src.shape()), " on the ",
                          be.name(), " backend: ", e.what()));
    }
    copies.push_back({.src = src, .dst = d});
    *t = d;
  });
  be.copy_many(copies, progress);
}

}  // namespace

TextWeights TextWeights::to_backend(const TextConfig& cfg, Backend& be,
                                    const std::function<void(size_t, size_t)>& progress) const {
  TextWeights out = *this;
  if (be.device() == Device::CPU) return out;
  upload(cfg, be, out, [](int) { return true; }, progress);
  return out;
}

std::vector<OffloadLayer> TextWeights::bound_layer_tensors(const TextConfig& cfg) const {
  std::vector<OffloadLayer> out(static_cast<size_t>(num_bound_layers));
  TextWeights view = *this;  // visit_text_tensors hands out mutable slots; nothing is written
  visit_text_tensors(cfg, &view, [&](const std::string& name, const Shape&, Kind, int layer, Tensor* t) {
    if (layer >= 0 && layer < num_bound_layers) out[static_cast<size_t>(layer)].emplace_back(name, *t);
  });
  return out;
}

TextWeights TextWeights::to_backend_streamed(const TextConfig& cfg, Backend& be, const LayerOffload& off) const {
  MAGI2_CHECK(off.num_layers() == static_cast<size_t>(num_bound_layers), "text encoder: the layer offload holds ",
              off.num_layers(), " layers, the weights bind ", num_bound_layers);
  TextWeights out = *this;
  upload(cfg, be, out, [](int layer) { return layer < 0; }, {});
  std::vector<size_t> next(static_cast<size_t>(num_bound_layers), 0);
  visit_text_tensors(cfg, &out, [&](const std::string& name, const Shape&, Kind, int layer, Tensor* t) {
    if (layer < 0 || layer >= num_bound_layers) return;
    const std::vector<Tensor>& views = off.layer(static_cast<size_t>(layer));
    size_t& i = next[static_cast<size_t>(layer)];
    MAGI2_CHECK(i < views.size(), "text encoder: the layer offload has no tensor for ", name);
    *t = views[i++];
  });
  for (int l = 0; l < num_bound_layers; ++l)
    MAGI2_CHECK(next[static_cast<size_t>(l)] == off.layer(static_cast<size_t>(l)).size(),
                "text encoder: the layer offload's layer ", l, " holds other tensors than the weights bind");
  return out;
}

int text_layer_of(const std::string& name) {
  if (!starts_with(name, "layers.")) return -1;
  const size_t dot = name.find('.', 7);
  if (dot == std::string::npos || dot == 7) return -1;
  return std::stoi(name.substr(7, dot - 7));
}

}  // namespace magi2::qwen35
