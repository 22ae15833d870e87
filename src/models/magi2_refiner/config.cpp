#include "models/magi2_refiner/config.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_depth.h"
#include "io/mmap_file.h"
#include "models/json_fields.h"

namespace magi2 {

using json = nlohmann::json;
using config_json::check_keys;
using config_json::get;
using config_json::section;

RefinerArch::RefinerArch() {
  for (int l = 0; l < num_layers; ++l) local_attn_layers.push_back(l);
}

bool RefinerArch::is_mm_layer(int layer) const {
  return std::find(mm_layers.begin(), mm_layers.end(), layer) != mm_layers.end();
}

bool RefinerArch::is_local_attn_layer(int layer) const {
  return std::find(local_attn_layers.begin(), local_attn_layers.end(), layer) != local_attn_layers.end();
}

void RefinerArch::validate(const std::string& src) const {
  const std::string w = str_cat("config '", src, "': magi2_refiner_arch_config.");
  MAGI2_CHECK(num_layers >= 1 && num_layers <= 1024, w, "num_layers must be in 1..1024, got ", num_layers);
  MAGI2_CHECK(head_dim >= 8 && head_dim % 8 == 0 && head_dim <= 512, w, "head_dim must be a multiple of 8 in 8..512, got ",
              head_dim);
  MAGI2_CHECK(hidden_size >= head_dim && hidden_size % head_dim == 0 && hidden_size <= 65536, w,
              "hidden_size must be a multiple of head_dim, got ", hidden_size);
  MAGI2_CHECK(num_query_groups >= 1 && num_heads_q() % num_query_groups == 0, w,
              "num_query_groups must divide the ", num_heads_q(), " query heads, got ", num_query_groups);
  for (int c : {video_in_channels, audio_in_channels, text_in_channels})
    MAGI2_CHECK(c >= 1 && c <= 65536, w, "in-channels must be in 1..65536, got ", c);
  for (int l : mm_layers) MAGI2_CHECK(l >= 0 && l < num_layers, w, "mm_layers: layer ", l, " out of range");
  for (int l : local_attn_layers)
    MAGI2_CHECK(l >= 0 && l < num_layers, w, "local_attn_layers: layer ", l, " out of range");
  MAGI2_CHECK(static_cast<int>(local_attn_layers.size()) == num_layers, w,
              "local_attn_layers: every layer must use window attention (dense refiner layers are not supported)");
  MAGI2_CHECK(params_dtype == "bfloat16" || params_dtype == "torch.bfloat16", w, "params_dtype must be bfloat16, got ",
              params_dtype);
  MAGI2_CHECK(activation_type == "swiglu7", w, "activation_type must be swiglu7, got ", activation_type);
  MAGI2_CHECK(enable_attn_gating, w, "enable_attn_gating: false is not supported");
}

RefinerArch RefinerArch::first_layers(int layers, const std::string& source) const {
  RefinerArch a = *this;
  if (layers <= 0 || layers >= a.num_layers) return a;
  a.num_layers = layers;
  a.mm_layers.clear();
  for (int l : {0, 1, layers - 2, layers - 1})
    if (l >= 0 && l < layers && (a.mm_layers.empty() || a.mm_layers.back() < l)) a.mm_layers.push_back(l);
  a.local_attn_layers.clear();
  for (int l = 0; l < layers; ++l) a.local_attn_layers.push_back(l);
  a.validate(source);
  return a;
}

RefinerConfig RefinerConfig::release() { return RefinerConfig{}; }

RefinerConfig RefinerConfig::from_json_text(const std::string& text, const std::string& src) {
  try {
    const json j = parse_json_text(text, str_cat("config '", src, "'"));
    if (!j.is_object()) throw Error(str_cat("config '", src, "' is not a JSON object"));
    RefinerConfig c = release();
    c.source = src;
    const json* ap = section(j, "magi2_refiner_arch_config", "", src);
    if (!ap) throw Error(str_cat("config '", src, "' has no magi2_refiner_arch_config"));
    const json& a = *ap;
    const std::string w = "magi2_refiner_arch_config.";
    check_keys(a,
               {"num_layers", "hidden_size", "head_dim", "num_query_groups", "video_in_channels", "audio_in_channels",
                "text_in_channels", "checkpoint_qk_layernorm_rope", "params_dtype", "mm_layers", "local_attn_layers",
                "enable_attn_gating", "post_norm_layers", "activation_type", "layer_activation_types", "num_heads_q",
                "num_heads_kv"},
               w, src);
    RefinerArch& r = c.arch;
    get(a, "num_layers", &r.num_layers, w, src);
    r.local_attn_layers.clear();
    for (int l = 0; l < r.num_layers; ++l) r.local_attn_layers.push_back(l);
    config_json::get_backbone_fields(a, &r, w, src);
    get(a, "mm_layers", &r.mm_layers, w, src);
    get(a, "local_attn_layers", &r.local_attn_layers, w, src);
    get(a, "enable_attn_gating", &r.enable_attn_gating, w, src);
    get(a, "activation_type", &r.activation_type, w, src);
    std::vector<int> post_norm;
    get(a, "post_norm_layers", &post_norm, w, src);
    if (!post_norm.empty()) throw Error(str_cat("config '", src, "': ", w, "post_norm_layers is not supported"));
    if (a.contains("layer_activation_types") && !(a["layer_activation_types"].is_object() && a["layer_activation_types"].empty()))
      throw Error(str_cat("config '", src, "': ", w, "layer_activation_types is not supported"));
    r.validate(src);

    if (const json* ep = section(j, "evaluation_config", "", src)) {
      const json& e = *ep;
      const std::string ew = "evaluation_config.";
      RefinerEval& v = c.eval;
      get(e, "magi2_refiner_video_txt_guidance_scale", &v.video_guidance_scale, ew, src);
      get(e, "magi2_refiner_audio_txt_guidance_scale", &v.audio_guidance_scale, ew, src);
      get(e, "magi2_refiner_noise_value", &v.noise_value, ew, src);
      get(e, "magi2_refiner_vae_stride", &v.vae_stride, ew, src);
      get(e, "magi2_refiner_audio_noise_scale", &v.audio_noise_scale, ew, src);
      get(e, "magi2_refiner_num_inference_steps", &v.num_inference_steps, ew, src);
      get(e, "magi2_refiner_shift", &v.shift, ew, src);
      std::vector<int> patch = {1, 1, 1};
      get(e, "magi2_refiner_patch_size", &patch, ew, src);
      bool cfg_trick = false;
      get(e, "use_cfg_trick", &cfg_trick, ew, src);
      auto fail = [&](const std::string& key, const std::string& why) {
        throw Error(str_cat("config '", src, "': ", ew, key, " ", why));
      };
      if (cfg_trick) fail("use_cfg_trick", "is not supported by the refiner stage");
      if (patch != std::vector<int>{1, 1, 1}) fail("magi2_refiner_patch_size", "must be [1, 1, 1]");
      if (v.vae_stride.size() != 3 || v.vae_stride[1] != 16 || v.vae_stride[2] != 16 || v.vae_stride[0] != 4)
        fail("magi2_refiner_vae_stride", "must be [4, 16, 16]");
      if (v.noise_value < 0 || v.noise_value >= 1000) fail("magi2_refiner_noise_value", "must be in 0..999");
      if (v.audio_noise_scale >= 0) fail("magi2_refiner_audio_noise_scale", "must be < 0 (no audio tokens)");
      if (v.num_inference_steps < 1 || v.num_inference_steps > 1000)
        fail("magi2_refiner_num_inference_steps", "must be in 1..1000");
      if (!(v.shift > 0)) fail("magi2_refiner_shift", "must be > 0");
      if (const json* dp = section(e, "magi2_refiner_data_proxy_config", ew, src)) {
        const std::string dw = "magi2_refiner_data_proxy_config.";
        int tp = 1, ps = 1, text_offset = 0;
        std::string interp = "extra", coords = "v1", cond = "none";
        get(*dp, "t_patch_size", &tp, ew + dw, src);
        get(*dp, "patch_size", &ps, ew + dw, src);
        get(*dp, "spatial_rope_interpolation", &interp, ew + dw, src);
        get(*dp, "coords_style", &coords, ew + dw, src);
        get(*dp, "text_offset", &text_offset, ew + dw, src);
        get(*dp, "magi2_refiner_condition_input", &cond, ew + dw, src);
        if (tp != 1 || ps != 1) fail(dw + "patch_size", "must be 1 (and t_patch_size 1)");
        if (interp != "extra") fail(dw + "spatial_rope_interpolation", "must be \"extra\"");
        if (cond != "none") fail(dw + "magi2_refiner_condition_input", "must be \"none\"");
        if (const json* ac = section(*dp, "attn_config", ew + dw, src)) {
          const std::string aw = dw + "attn_config.";
          std::string mode = "dense";
          get(*ac, "mode", &mode, ew + aw, src);
          if (mode != "window" && mode != "local") fail(aw + "mode", "must be \"window\"");
          get(*ac, "block_t_size", &v.window.block_t, ew + aw, src);
          get(*ac, "block_size", &v.window.block_hw, ew + aw, src);
          if (const json* wn = section(*ac, "window", ew + aw, src)) {
            const std::string ww = aw + "window.";
            std::string level = "block", block_mode = "scan";
            get(*wn, "level", &level, ew + ww, src);
            get(*wn, "block_mode", &block_mode, ew + ww, src);
            get(*wn, "block_t_size", &v.window.block_t, ew + ww, src);
            get(*wn, "block_size", &v.window.block_hw, ew + ww, src);
            get(*wn, "block_t_radius", &v.window.radius_t, ew + ww, src);
            get(*wn, "block_h_radius", &v.window.radius_h, ew + ww, src);
            get(*wn, "block_w_radius", &v.window.radius_w, ew + ww, src);
            if (level != "block") fail(ww + "level", "must be \"block\"");
            if (block_mode != "grid") fail(ww + "block_mode", "must be \"grid\"");
          } else {
            fail(aw + "window", "is missing");
          }
        }
      }
      const RefinerWindow& wd = v.window;
      if (wd.block_t < 1 || wd.block_hw < 1 || wd.radius_t < 0 || wd.radius_h < 0 || wd.radius_w < 0)
        fail("magi2_refiner_data_proxy_config.attn_config", "block sizes must be >= 1 and radii >= 0");
    }
    return c;
  } catch (const nlohmann::json::exception& e) {
    throw Error(str_cat("config '", src, "': ", e.what()));
  }
}

RefinerConfig RefinerConfig::from_file(const std::string& path) { return from_json_text(read_text_file(path), path); }

}  // namespace magi2
