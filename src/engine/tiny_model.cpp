#include "engine/tiny_model.h"

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <numbers>
#include <system_error>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "io/mmap_file.h"
#include "io/safetensors.h"
#include "models/magi2_dit/weights.h"
#include "models/magi2_refiner/config.h"
#include "models/magi2_refiner/weights.h"
#include "models/oobleck/tiny.h"
#include "models/turbovae/decoder.h"
#include "models/turbovae/tiny.h"
#include "models/wan22_vae/tiny.h"
#include "core/seeded_random.h"
#include "core/seeded_tensor.h"
#include "engine/model_writer.h"
#include "engine/tiny_text_encoder.h"

namespace magi2 {

namespace {

namespace fs = std::filesystem;

// The layer kinds of shared/golden/dit_tiny/config.json (dense mm layers 0 and
// 3, multi-head MoE layers 1 and 2, mHC, sinks, gating), narrowed so that the
// README's default 10 s 272p clip (~29k packed tokens per step) runs in
// seconds per step on a CPU: hidden 64 = 2 heads x 32 (dense MLP 128 wide, as
// in the golden config), experts 32 wide, and 4
// sampling steps. engine_config.load is preview/, as in the release (spec
// pipeline §9); the golden harness kept its weights in ckpt/.
constexpr const char* kTinyConfigJson = R"JSON({
  "engine_config": {
    "seed": 0, "load": "preview", "distributed_backend": "nccl",
    "cp_size": 1, "ep_size": 1, "cp_strategy": "none"
  },
  "arch_config": {
    "num_layers": 4, "hidden_size": 64, "head_dim": 32, "num_query_groups": 2,
    "video_in_channels": 48, "audio_in_channels": 64, "text_in_channels": 64,
    "params_dtype": "bfloat16", "intermediate_factor": 3, "mm_layers": [0, 3],
    "activation_type": "swiglu7", "attn_softcap": -1.0,
    "attn_gating": {"enable": true},
    "attn_sinks": {"enable": true, "sink_token_num": 1},
    "mhc_config": {"enable": true, "num_stream": 4, "alpha_init": 0.01},
    "moe_config": {
      "num_experts": 16, "top_k": 4, "score_func": "sigmoid", "route_norm": true,
      "route_scale": 4.9, "moe_layers": [1, 2], "expert_intermediate_size": 32,
      "shared_expert_intermediate_size": 32,
      "modality_specific_expert_intermediate_size": 48, "num_heads": 4
    }
  },
  "magi2_refiner_arch_config": {
    "num_layers": 4, "hidden_size": 64, "head_dim": 32, "num_query_groups": 1,
    "video_in_channels": 48, "audio_in_channels": 64, "text_in_channels": 64,
    "checkpoint_qk_layernorm_rope": false, "params_dtype": "bfloat16", "mm_layers": [0, 3],
    "local_attn_layers": [0, 1, 2, 3], "enable_attn_gating": true, "post_norm_layers": [],
    "activation_type": "swiglu7"
  },
  "evaluation_config": {
    "use_magi2_refiner": true, "magi2_refiner_model_name": "magi2_refiner",
    "magi2_refiner_video_txt_guidance_scale": 2.0, "magi2_refiner_audio_txt_guidance_scale": 5.0,
    "magi2_refiner_noise_value": 220, "magi2_refiner_vae_stride": [4, 16, 16],
    "magi2_refiner_patch_size": [1, 1, 1], "magi2_refiner_audio_noise_scale": -1.0,
    "magi2_refiner_data_proxy_config": {
      "t_patch_size": 1, "patch_size": 1, "frame_receptive_field": 11,
      "spatial_rope_interpolation": "extra", "coords_style": "v1", "text_offset": 0,
      "magi2_refiner_condition_input": "none",
      "attn_config": {
        "mode": "window", "block_t_size": 8, "block_size": 4,
        "window": {
          "level": "block", "block_mode": "grid", "block_t_radius": 2, "block_h_radius": 2,
          "block_w_radius": 2, "win_size": 384, "frame_receptive_field": -1,
          "auto_range_merge": true, "sparse_load": false, "full_attn_layers": []
        }
      }
    },
    "magi2_refiner_num_inference_steps": 5, "magi2_refiner_shift": 5.0,
    "fps": 12.5, "shift": 7.0, "vae_stride": [8, 16, 16], "patch_size": [1, 1, 1],
    "z_dim": 48, "txt_encoder_type": "qwen35",
    "video_txt_guidance_scale": 5.0, "audio_txt_guidance_scale": 7.0,
    "use_cfg_trick": false, "cfg_trick_start_frame": 13, "cfg_trick_value": 2.0,
    "use_dynamic_cfg": false, "dynamic_cfg_start_t": 500, "dynamic_cfg_cutoff_value": 2.0,
    "use_negative_prompt": true, "use_ref_for_uncond": true,
    "use_skimmed_cfg_linear": false, "skimmed_cfg_scale": 3.0, "cfg_rescale": 0.0,
    "ref_image_type": "original", "num_inference_steps": 4,
    "data_proxy_config": {
      "t_patch_size": 1, "patch_size": 1, "spatial_rope_interpolation": "extra",
      "add_time_token": false, "time_channel_dim": 64, "time_aligned_rope": false,
      "audio_latent_fps": 25.0, "time_pos_fps": 3.125,
      "vae_first_latent_is_image": true, "video_fps": 25.0
    }
  }
})JSON";

constexpr const char* kTinyCacheName = "tiny-v4";  // bump when the generator, recipe or layout changes
constexpr const char* kShard1 = "model-00001-of-00002.safetensors";
constexpr const char* kShard2 = "model-00002-of-00002.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";

// How one tensor is drawn (golden README "Checkpoint (ckpt/)", meta.json "init").
struct Recipe {
  enum Kind { Normal, Uniform, RopeBands } kind = Normal;
  double a = 0, b = 0;  // Normal: mean, std; Uniform: low, high
};

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

Recipe recipe_for(const DitTensorSpec& t) {
  const std::string& n = t.name;
  // Linear weights are [out, in]: std g / sqrt(in).
  auto lin = [&](double g) { return Recipe{Recipe::Normal, 0.0, g / std::sqrt(static_cast<double>(t.shape.back()))}; };
  auto normal = [](double mean, double sd) { return Recipe{Recipe::Normal, mean, sd}; };
  if (n == "pre_adapter.rope.bands") return {Recipe::RopeBands};
  if (contains(n, "mhc_alpha_")) return {Recipe::Uniform, 0.3, 1.5};
  if (contains(n, "mhc_bias_res_")) return normal(0, 1);
  if (contains(n, "mhc_bias_")) return normal(0, 0.5);
  if (contains(n, "mhc_phi_fused_")) return normal(0, 1);
  if (n.ends_with("attention.sinks")) return normal(3.5, 1);
  if (n.ends_with("q_norm.weight") || n.ends_with("k_norm.weight")) return normal(0.5, 0.15);
  // RMSNorm weights (the model applies 1 + w).
  if (n.ends_with("norm.weight") || contains(n, "final_norm_")) return normal(0, 0.15);
  if (n.ends_with("_embedder.bias")) return normal(0, 0.2);
  if (contains(n, "router.expert_bias")) return normal(0, 0.25);  // expert_bias and _ema differ: own streams
  // Expert banks [heads*experts, d_in, d_out]: scaled by their input width (dim 1).
  const double in1 = t.shape.size() == 3 ? static_cast<double>(t.shape[1]) : 1.0;
  if (n.ends_with("moe_mlp.W_gate") || n.ends_with("moe_mlp.W_up")) return normal(0, 2.0 / std::sqrt(in1));
  if (n.ends_with("moe_mlp.W_down")) return normal(0, 0.4 / std::sqrt(in1));
  if (n.ends_with("moe_mlp.gate")) return lin(1.0);  // [heads*experts, d_head]: 1/sqrt(d_head)
  // SwiGLU7 inputs get g = 2.5 so some hit the +-7 clamps; outputs 0.4.
  if (contains(n, "up_gate_proj") || contains(n, "expert_fc1")) return lin(2.5);
  if (contains(n, "down_proj") || contains(n, "expert_fc2")) return lin(0.4);
  if (contains(n, "linear_proj")) return lin(2.0);
  if (n.ends_with(".weight") && t.shape.size() == 2) return lin(1.0);  // embedders, linear_g/qkv, split/merge, final_linear
  throw Error(str_cat("make-tiny: no init recipe for tensor '", n, "' (update src/engine/tiny_model.cpp)"));
}

// One tensor's values, in its official dtype.
// Release-width random weights in seconds: each element is a shared pool of
// 2^20 standard normals (drawn once by normal_sample) at a per-tensor offset and
// stride, scaled by the tensor's recipe. Not independent draws: for timing.
Tensor pooled_random(const DitTensorSpec& t, const Recipe& r, uint64_t seed) {
  constexpr uint64_t kPool = uint64_t{1} << 20;
  static const std::vector<float> pool = [] {
    std::vector<float> p(kPool);
    for (uint64_t i = 0; i < kPool; ++i) p[i] = static_cast<float>(normal_sample(0x5eed, i, 0.0, 1.0));
    return p;
  }();
  const uint64_t key = fnv1a(t.name) ^ seed;
  const uint64_t off = splitmix(key, 0) & (kPool - 1), stride = (splitmix(key, 1) & (kPool - 1)) | 1;
  int64_t n = 1;
  for (int64_t s : t.shape) n *= s;
  Tensor out = Tensor::empty(t.shape, t.dtype);
  const bool uni = r.kind == Recipe::Uniform;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float z = pool[(off + static_cast<uint64_t>(i) * stride) & (kPool - 1)];
    // Uniform recipes map the normal through its rough CDF range [-3, 3].
    const double x = uni ? r.a + (r.b - r.a) * std::min(1.0, std::max(0.0, (z + 3.0) / 6.0)) : r.a + r.b * z;
    if (t.dtype == DType::F32)
      out.data_as<float>()[i] = static_cast<float>(x);
    else
      out.data_as<uint16_t>()[i] = f32_to_bf16_bits(static_cast<float>(x));
  }
  return out;
}

}  // namespace

double random_dit_tensor_std(const DitTensorSpec& t) {
  const Recipe r = recipe_for(t);
  if (r.kind == Recipe::Normal) return r.b;
  if (r.kind == Recipe::Uniform) return (r.b - r.a) / std::sqrt(12.0);
  return 0.0;
}

Tensor random_dit_tensor(const DitTensorSpec& t, uint64_t seed, bool fast) {
  const Recipe r = recipe_for(t);
  if (fast && r.kind != Recipe::RopeBands) return pooled_random(t, r, seed);
  const uint64_t key = fnv1a(t.name) ^ seed;
  int64_t n = 1;
  for (int64_t s : t.shape) n *= s;
  // seeded_tensor rounds to nearest even: the stored bf16 values are exact.
  return seeded_tensor(t.shape, t.dtype, [&](uint64_t i) -> double {
    if (r.kind == Recipe::RopeBands) {
      // Official default freq_bands 10000^(-b/nb) (spec magi2-dit.md §2.3), in the
      // official fp32 form 1 / 10000^(b/nb): bit-identical to the golden buffer.
      return 1.0f / std::pow(10000.0f, static_cast<float>(i) / static_cast<float>(n));
    }
    if (r.kind == Recipe::Uniform) return r.a + (r.b - r.a) * unit_uniform(key, i);
    return normal_sample(key, i, r.a, r.b);
  });
}

namespace {

// Adapters and the first half of the layers go to shard 1, the rest to shard 2
// (golden ckpt/: layers 0-1 + adapters | layers 2-3).
const char* shard_of(const std::string& name, int num_layers) {
  const std::string pre = "block.layers.";
  if (name.rfind(pre, 0) != 0) return kShard1;
  const int layer = std::atoi(name.c_str() + pre.size());
  return layer < (num_layers + 1) / 2 ? kShard1 : kShard2;
}

// The folder make_tiny_model writes, complete (the final rename makes it all-or-nothing).
bool is_complete_tiny(const fs::path& d) {
  std::error_code ec;
  return fs::is_regular_file(d / "config.json", ec) && fs::is_regular_file(d / "preview" / kIndex, ec) &&
         fs::is_regular_file(d / "preview" / kShard1, ec) && fs::is_regular_file(d / "preview" / kShard2, ec) &&
         fs::is_regular_file(d / "text_encoder" / "model.safetensors", ec) &&
         fs::is_regular_file(d / "text_encoder" / "tokenizer.json", ec) &&
         fs::is_regular_file(d / "turbo_vae" / kTurboVaeCheckpointName, ec) &&
         fs::is_regular_file(d / "turbo_vae" / kTurboVaeConfigName, ec) &&
         fs::is_regular_file(d / "stable-audio-open-1.0" / "model.safetensors", ec) &&
         fs::is_regular_file(d / "stable-audio-open-1.0" / "model_config.json", ec) &&
         fs::is_regular_file(d / "vae" / "Wan2.2_VAE.pth", ec) && fs::is_regular_file(d / "refiner" / kIndex, ec) &&
         fs::is_regular_file(d / "refiner" / kShard1, ec) && fs::is_regular_file(d / "refiner" / kShard2, ec);
}

// One checkpoint folder in the official layout: two shards + index.
void write_checkpoint(const fs::path& dir, const std::vector<DitTensorSpec>& specs, int num_layers, uint64_t seed) {
  write_sharded_checkpoint(
      dir.string(), specs, [&](const std::string& name) { return shard_of(name, num_layers); },
      [&](const DitTensorSpec& s) { return random_dit_tensor(s, seed); }, true);
}

void write_folder(const fs::path& root, uint64_t seed) {
  const Magi2Config cfg = tiny_config();
  write_checkpoint(root / "preview", dit_tensor_specs(cfg.arch), cfg.arch.num_layers, seed);
  // The 1080p refiner: the same init recipes by tensor name, its own seed stream.
  const RefinerConfig rc = RefinerConfig::from_json_text(kTinyConfigJson, "<built-in tiny config>");
  std::vector<DitTensorSpec> rspecs;
  for (const auto& [name, sd] : RefinerWeights::specs(rc.arch)) rspecs.push_back({name, sd.first, sd.second});
  write_checkpoint(root / "refiner", rspecs, rc.arch.num_layers, seed ^ 0x726566696e6572ull);
  write_file_atomic((root / "config.json").string(), tiny_config_json());
  write_tiny_text_encoder((root / "text_encoder").string(), seed);
  // The codecs, each in its official file format and folder.
  write_tiny_turbo_vae((root / "turbo_vae").string(), seed);
  write_tiny_sao_vae((root / "stable-audio-open-1.0").string(), seed);
  write_tiny_wan22_vae((root / "vae" / "Wan2.2_VAE.pth").string(), seed);
}

bool usable_dir(const fs::path& p) {
  std::error_code ec;
  fs::create_directories(p, ec);
  return !ec && fs::is_directory(p, ec) && ::access(p.c_str(), W_OK | X_OK) == 0;
}

}  // namespace

Magi2Config tiny_config() { return Magi2Config::from_json_text(kTinyConfigJson, "<built-in tiny config>"); }

// ordered_json keeps the official key order (engine, arch, evaluation).
std::string tiny_config_json() { return nlohmann::ordered_json::parse(kTinyConfigJson).dump(2) + "\n"; }

TinyModelSize tiny_model_size() {
  TinyModelSize s;
  for (const auto& t : dit_tensor_specs(tiny_config().arch)) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    s.num_tensors += 1;
    s.num_bytes += static_cast<size_t>(n) * dtype_size(t.dtype);
  }
  return s;
}

void make_tiny_model(const std::string& dir, uint64_t seed) {
  build_model_folder(dir, {"preview", "refiner", "text_encoder", "turbo_vae", "stable-audio-open-1.0", "vae"},
                     [&](const fs::path& tmp) { write_folder(tmp, seed); }, "make-tiny");
}

std::string model_cache_dir(const CacheEnv& env) {
  if (const std::string& d = env.cache_dir; !d.empty()) {
    if (!usable_dir(d)) throw Error(str_cat("MAGI2_CACHE_DIR '", d, "' cannot be created or is not writable"));
    return d;
  }
  std::vector<fs::path> candidates;
  if (const std::string& x = env.xdg_cache_home; !x.empty()) candidates.push_back(fs::path(x) / "magi2");
  if (const std::string& h = env.home; !h.empty()) candidates.push_back(fs::path(h) / ".cache" / "magi2");
  candidates.push_back("/tmp/magi2-cache");  // last resort: no usable home
  for (const auto& c : candidates)
    if (usable_dir(c)) return c.string();
  throw Error("no usable model cache folder (set MAGI2_CACHE_DIR to a writable folder)");
}

std::string resolve_model(const std::string& model, const CacheEnv& env) {
  if (model.rfind("builtin:", 0) != 0) return model;
  if (model != kBuiltinTiny)
    throw Error(str_cat("unknown built-in model '", model, "' (known: ", kBuiltinTiny, ")"));
  const fs::path dir = fs::path(model_cache_dir(env)) / kTinyCacheName;
  if (is_complete_tiny(dir)) return dir.string();
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_empty(dir, ec))
    throw Error(str_cat("cache folder '", dir.string(), "' is not a complete tiny model; remove it"));
  try {
    make_tiny_model(dir.string(), 0);
  } catch (const Error&) {
    if (is_complete_tiny(dir)) return dir.string();  // another process created it first: use theirs
    throw;
  }
  return dir.string();
}

}  // namespace magi2
