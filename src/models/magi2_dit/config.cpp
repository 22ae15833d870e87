#include "models/magi2_dit/config.h"
#include "models/json_fields.h"

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "io/json_depth.h"
#include "io/mmap_file.h"

namespace magi2 {

using json = nlohmann::json;
using config_json::check_keys;
using config_json::get;
using config_json::section;

DitArch::DitArch() {
  for (int i = 2; i < 38; ++i) moe_layers.push_back(i);
}

int DitArch::dense_intermediate() const {
  const int raw = static_cast<int>(hidden_size * intermediate_factor * 2.0 / 3.0);
  return raw / 128 * 128;
}

int DitArch::max_in_channels() const {
  return std::max({video_in_channels, audio_in_channels, text_in_channels});
}

int DitArch::out_channels() const { return std::max(video_in_channels, audio_in_channels); }

bool DitArch::is_mm_layer(int layer) const {
  return std::find(mm_layers.begin(), mm_layers.end(), layer) != mm_layers.end();
}

bool DitArch::is_moe_layer(int layer) const {
  return std::find(moe_layers.begin(), moe_layers.end(), layer) != moe_layers.end();
}

void DitArch::validate(const std::string& src) const {
  auto bad = [&](const std::string& key, const std::string& why) {
    return Error(str_cat("config '", src, "': arch_config.", key, ": ", why));
  };
  if (num_layers < 1) throw bad("num_layers", "must be >= 1");
  if (hidden_size < 1 || head_dim < 8 || hidden_size % head_dim != 0)
    throw bad("hidden_size", "must be a positive multiple of head_dim");
  if (head_dim % 8 != 0) throw bad("head_dim", "must be a multiple of 8 (3 RoPE axes x 2)");
  if (num_query_groups != num_heads_q())
    throw bad("num_query_groups", str_cat("GQA is not supported: need ", num_heads_q(), " K/V heads"));
  if (video_in_channels < 1 || audio_in_channels < 1 || text_in_channels < 1)
    throw bad("*_in_channels", "must be >= 1");
  if (params_dtype != "bfloat16") throw bad("params_dtype", "only bfloat16 is supported");
  if (activation_type != "swiglu7") throw bad("activation_type", "only swiglu7 is supported");
  if (attn_softcap > 0) throw bad("attn_softcap", "soft-capping is not supported (release: -1)");
  if (!attn_gating) throw bad("attn_gating.enable", "must be true");
  if (!attn_sinks || sink_token_num != 1) throw bad("attn_sinks", "exactly one sink token is supported");
  if (!mhc_enable || mhc_num_stream != 4) throw bad("mhc_config", "mHC with 4 streams is required");
  if (moe_score_func != "sigmoid") throw bad("moe_config.score_func", "only sigmoid is supported");
  if (moe_num_heads < 1 || hidden_size % moe_num_heads != 0)
    throw bad("moe_config.num_heads", "must divide hidden_size");
  if (moe_top_k < 1 || moe_top_k > moe_num_experts) throw bad("moe_config.top_k", "must be in [1, num_experts]");
  if (dense_intermediate() < 1) throw bad("intermediate_factor", "gives an empty dense MLP");
  for (int l : mm_layers)
    if (l < 0 || l >= num_layers) throw bad("mm_layers", str_cat("layer ", l, " out of range"));
  for (int l : moe_layers) {
    if (l < 0 || l >= num_layers) throw bad("moe_config.moe_layers", str_cat("layer ", l, " out of range"));
    if (is_mm_layer(l)) throw bad("moe_config.moe_layers", str_cat("layer ", l, " is also in mm_layers"));
  }
}

Magi2Config Magi2Config::release() {
  Magi2Config c;
  c.engine.cp_size = 8;
  c.engine.ep_size = 8;
  return c;
}


Magi2Config Magi2Config::from_json_text(const std::string& text, const std::string& src) {
  // Any JSON type mismatch below (a number where a string is due, ...)
  // becomes one Error naming the source, like every other bad value.
  try {
    const json j = parse_json_text(text, str_cat("config '", src, "'"));
    if (!j.is_object()) throw Error(str_cat("config '", src, "' is not a JSON object"));
    if (!j.contains("arch_config")) throw Error(str_cat("config '", src, "' has no arch_config"));
    Magi2Config c = release();
    c.source = src;
    if (const json* ep = section(j, "engine_config", "", src)) {
      const json& e = *ep;
      get(e, "seed", &c.engine.seed, "engine_config.", src);
      get(e, "load", &c.engine.load, "engine_config.", src);
      get(e, "cp_size", &c.engine.cp_size, "engine_config.", src);
      get(e, "ep_size", &c.engine.ep_size, "engine_config.", src);
    }
    const json& a = j["arch_config"];
    if (!a.is_object()) throw Error(str_cat("config '", src, "': arch_config is not an object"));
    check_keys(a,
               {"num_layers", "hidden_size", "head_dim", "num_query_groups", "video_in_channels",
                "audio_in_channels", "text_in_channels", "params_dtype", "intermediate_factor", "mm_layers",
                "activation_type", "attn_softcap", "attn_gating", "attn_sinks", "mhc_config", "moe_config",
                "layer_activation_types", "num_heads_q", "num_heads_kv"},
               "arch_config.", src);
    DitArch& r = c.arch;
    const std::string w = "arch_config.";
    get(a, "num_layers", &r.num_layers, w, src);
    config_json::get_backbone_fields(a, &r, w, src);
    get(a, "intermediate_factor", &r.intermediate_factor, w, src);
    get(a, "mm_layers", &r.mm_layers, w, src);
    get(a, "activation_type", &r.activation_type, w, src);
    get(a, "attn_softcap", &r.attn_softcap, w, src);
    if (const json* g = section(a, "attn_gating", w, src)) {
      check_keys(*g, {"enable"}, w + "attn_gating.", src);
      get(*g, "enable", &r.attn_gating, w + "attn_gating.", src);
    }
    if (const json* sk = section(a, "attn_sinks", w, src)) {
      check_keys(*sk, {"enable", "sink_token_num"}, w + "attn_sinks.", src);
      get(*sk, "enable", &r.attn_sinks, w + "attn_sinks.", src);
      get(*sk, "sink_token_num", &r.sink_token_num, w + "attn_sinks.", src);
    }
    if (const json* mp = section(a, "mhc_config", w, src)) {
      const json& m = *mp;
      check_keys(m, {"enable", "num_stream", "alpha_init"}, w + "mhc_config.", src);
      get(m, "enable", &r.mhc_enable, w + "mhc_config.", src);
      get(m, "num_stream", &r.mhc_num_stream, w + "mhc_config.", src);
      get(m, "alpha_init", &r.mhc_alpha_init, w + "mhc_config.", src);
    }
    if (const json* mp = section(a, "moe_config", w, src)) {
      const json& m = *mp;
      const std::string mw = w + "moe_config.";
      check_keys(m,
                 {"num_experts", "top_k", "score_func", "route_norm", "route_scale", "moe_layers",
                  "expert_intermediate_size", "shared_expert_intermediate_size",
                  "modality_specific_expert_intermediate_size", "num_heads", "split_merge_intermediate_size"},
                 mw, src);
      get(m, "num_experts", &r.moe_num_experts, mw, src);
      get(m, "top_k", &r.moe_top_k, mw, src);
      get(m, "score_func", &r.moe_score_func, mw, src);
      get(m, "route_norm", &r.moe_route_norm, mw, src);
      get(m, "route_scale", &r.moe_route_scale, mw, src);
      get(m, "moe_layers", &r.moe_layers, mw, src);
      get(m, "expert_intermediate_size", &r.moe_expert_intermediate_size, mw, src);
      get(m, "shared_expert_intermediate_size", &r.moe_shared_expert_intermediate_size, mw, src);
      get(m, "modality_specific_expert_intermediate_size", &r.moe_modality_specific_expert_intermediate_size, mw,
          src);
      get(m, "num_heads", &r.moe_num_heads, mw, src);
    }
    r.validate(src);
    if (const json* ep = section(j, "evaluation_config", "", src)) {
      const json& e = *ep;
      const std::string ew = "evaluation_config.";
      EvaluationConfig& v = c.eval;
      get(e, "fps", &v.fps, ew, src);
      get(e, "shift", &v.shift, ew, src);
      get(e, "vae_stride", &v.vae_stride, ew, src);
      get(e, "patch_size", &v.patch_size, ew, src);
      get(e, "z_dim", &v.z_dim, ew, src);
      get(e, "txt_encoder_type", &v.txt_encoder_type, ew, src);
      get(e, "video_txt_guidance_scale", &v.video_txt_guidance_scale, ew, src);
      get(e, "audio_txt_guidance_scale", &v.audio_txt_guidance_scale, ew, src);
      get(e, "use_cfg_trick", &v.use_cfg_trick, ew, src);
      get(e, "use_dynamic_cfg", &v.use_dynamic_cfg, ew, src);
      get(e, "use_negative_prompt", &v.use_negative_prompt, ew, src);
      get(e, "use_ref_for_uncond", &v.use_ref_for_uncond, ew, src);
      get(e, "use_skimmed_cfg_linear", &v.use_skimmed_cfg_linear, ew, src);
      get(e, "cfg_rescale", &v.cfg_rescale, ew, src);
      get(e, "num_inference_steps", &v.num_inference_steps, ew, src);
      if (const json* dp = section(e, "data_proxy_config", ew, src)) {
        const json& d = *dp;
        const std::string dw = ew + "data_proxy_config.";
        get(d, "t_patch_size", &v.data_proxy.t_patch_size, dw, src);
        get(d, "patch_size", &v.data_proxy.patch_size, dw, src);
        get(d, "spatial_rope_interpolation", &v.data_proxy.spatial_rope_interpolation, dw, src);
        get(d, "add_time_token", &v.data_proxy.add_time_token, dw, src);
        get(d, "time_channel_dim", &v.data_proxy.time_channel_dim, dw, src);
      }
      if (v.num_inference_steps < 1)
        throw Error(str_cat("config '", src, "': evaluation_config.num_inference_steps must be >= 1"));
      if (v.data_proxy.time_channel_dim != 64 && v.data_proxy.time_channel_dim != 0)
        throw Error(str_cat("config '", src, "': evaluation_config.data_proxy_config.time_channel_dim must be 64"));
    }
    return c;
  } catch (const nlohmann::json::exception& e) {
    throw Error(str_cat("config '", src, "': ", e.what()));
  }
}

Magi2Config Magi2Config::from_file(const std::string& path) {
  return from_json_text(read_text_file(path), path);
}

std::string Magi2Config::summary() const {
  std::ostringstream os;
  const DitArch& a = arch;
  os << "config: " << source << "\n"
     << "  layers " << a.num_layers << ", hidden " << a.hidden_size << ", heads " << a.num_heads_q() << " x "
     << a.head_dim << ", mHC streams " << a.mhc_num_stream << " (virtual width " << a.virtual_width() << ")\n"
     << "  in channels video/audio/text " << a.video_in_channels << "/" << a.audio_in_channels << "/"
     << a.text_in_channels << ", dense MLP intermediate " << a.dense_intermediate() << "\n"
     << "  mm layers";
  for (int l : a.mm_layers) os << " " << l;
  os << "; MoE layers " << a.moe_layers.size() << " (" << a.moe_num_heads << " heads x " << a.moe_num_experts
     << " experts, top-" << a.moe_top_k << ", expert " << a.moe_expert_intermediate_size << ", route_scale "
     << a.moe_route_scale << ")\n"
     << "  sampler: " << eval.num_inference_steps << " steps, shift " << eval.shift << ", CFG video "
     << eval.video_txt_guidance_scale << " audio " << eval.audio_txt_guidance_scale << "\n";
  return os.str();
}

}  // namespace magi2
