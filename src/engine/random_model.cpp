#include "engine/random_model.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/model_writer.h"
#include "engine/tiny_model.h"
#include "engine/tiny_text_encoder.h"
#include "io/mmap_file.h"
#include "models/magi2_dit/weights.h"
#include "models/magi2_refiner/weights.h"
#include "models/oobleck/tiny.h"
#include "models/turbovae/tiny.h"
#include "ops/fp8_blocks.h"

namespace magi2 {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

constexpr int kReleaseLayers = 40, kReleaseTextLayers = 64, kReleaseRefinerLayers = 30;

// The keys both transformers' arch configs begin with (config_json::get_backbone_fields reads them).
template <typename Arch>
ojson backbone_json(const Arch& a) {
  return {{"num_layers", a.num_layers},
          {"hidden_size", a.hidden_size},
          {"head_dim", a.head_dim},
          {"num_query_groups", a.num_query_groups},
          {"video_in_channels", a.video_in_channels},
          {"audio_in_channels", a.audio_in_channels},
          {"text_in_channels", a.text_in_channels}};
}

// arch_config in the official key order (configs/magi2_preview.json).
ojson dit_arch_json(const DitArch& a) {
  ojson j = backbone_json(a);
  j["params_dtype"] = a.params_dtype;
  j["intermediate_factor"] = a.intermediate_factor;
  j["mm_layers"] = a.mm_layers;
  j["activation_type"] = a.activation_type;
  j["attn_softcap"] = a.attn_softcap;
  j["attn_gating"] = {{"enable", a.attn_gating}};
  j["attn_sinks"] = {{"enable", a.attn_sinks}, {"sink_token_num", a.sink_token_num}};
  j["mhc_config"] = {{"enable", a.mhc_enable}, {"num_stream", a.mhc_num_stream}, {"alpha_init", a.mhc_alpha_init}};
  j["moe_config"] = {{"num_experts", a.moe_num_experts},
                     {"top_k", a.moe_top_k},
                     {"score_func", a.moe_score_func},
                     {"route_norm", a.moe_route_norm},
                     {"route_scale", a.moe_route_scale},
                     {"moe_layers", a.moe_layers},
                     {"expert_intermediate_size", a.moe_expert_intermediate_size},
                     {"shared_expert_intermediate_size", a.moe_shared_expert_intermediate_size},
                     {"modality_specific_expert_intermediate_size", a.moe_modality_specific_expert_intermediate_size},
                     {"num_heads", a.moe_num_heads}};
  return j;
}

// magi2_refiner_arch_config (configs/magi2_refiner.json).
ojson refiner_arch_json(const RefinerArch& a) {
  ojson j = backbone_json(a);
  j["checkpoint_qk_layernorm_rope"] = false;
  j["params_dtype"] = a.params_dtype;
  j["mm_layers"] = a.mm_layers;
  j["local_attn_layers"] = a.local_attn_layers;
  j["enable_attn_gating"] = a.enable_attn_gating;
  j["post_norm_layers"] = ojson::array();
  j["activation_type"] = a.activation_type;
  return j;
}

// The DiT's tensors, made one at a time. FP8: each bank is drawn in bf16 by
// the recipe and block-quantised (as `magi2 quantize`); its scales, the next
// spec, come from that quantisation.
struct DitTensorMaker {
  uint64_t seed;
  std::map<std::string, Tensor> scales;  // bank scale name -> scale_inv, until written

  Tensor operator()(const DitTensorSpec& s) {
    if (auto it = scales.find(s.name); it != scales.end()) {
      Tensor t = it->second;
      scales.erase(it);
      return t;
    }
    if (s.dtype != DType::F8E4M3) return random_dit_tensor(s, seed);
    const Tensor bf16 = random_dit_tensor({s.name, s.shape, DType::BF16}, seed);
    Fp8Blocks b = quantize_fp8_blocks(bf16, s.name);
    scales.emplace(fp8_scale_name(s.name), b.scale_inv);
    return b.q;
  }
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

DitArch random_model_dit_arch(int layers, std::vector<int>* release_layers) {
  MAGI2_CHECK(layers >= 1 && layers <= kReleaseLayers, "--layers must be in [1, ", kReleaseLayers, "], got ", layers);
  DitArch a = Magi2Config::release().arch;
  const int mm = layers == 1 ? 0 : std::min(4, layers / 2), front = (mm + 1) / 2, back = mm / 2;
  a.num_layers = layers;
  a.mm_layers.clear();
  a.moe_layers.clear();
  std::vector<int> from;
  for (int l = 0; l < layers; ++l) {
    if (l < front) {
      a.mm_layers.push_back(l);
      from.push_back(l);
    } else if (l >= layers - back) {
      a.mm_layers.push_back(l);
      from.push_back(kReleaseLayers - (layers - l));
    } else {
      a.moe_layers.push_back(l);
      from.push_back(2 + l - front);
    }
  }
  a.validate(str_cat("make-random (--layers ", layers, ")"));
  if (release_layers) *release_layers = from;
  return a;
}

RandomModelLayout random_model_layout(const RandomModelOptions& o) {
  MAGI2_CHECK(o.text_layers >= 3 && o.text_layers <= kReleaseTextLayers, "--text-layers must be in [3, ",
              kReleaseTextLayers, "] (the features are hidden_states[-3]), got ", o.text_layers);
  MAGI2_CHECK(o.refiner_layers >= 0 && o.refiner_layers <= kReleaseRefinerLayers, "--refiner-layers must be in [0, ",
              kReleaseRefinerLayers, "], got ", o.refiner_layers);
  RandomModelLayout l;
  l.dit = random_model_dit_arch(o.layers, &l.release_layers);
  l.text = qwen35::TextConfig::qwen35_27b(o.text_layers);
  const int used = o.text_layers - 2;  // layers up to hidden_states[-3]
  const bool has_full = std::any_of(l.text.full_attention.begin(), l.text.full_attention.begin() + used,
                                    [](bool f) { return f; });
  if (!has_full && used >= 2) l.text.full_attention[static_cast<size_t>(used - 1)] = true;
  l.turbo_vae = release_turbo_vae_config();
  l.sao_channels = kReleaseSaoChannels;
  l.wan = release_wan22_vae_layout();
  l.refiner_layers = o.refiner_layers;
  if (o.refiner_layers > 0)
    l.refiner = RefinerConfig::release().arch.first_layers(o.refiner_layers,
                                                          str_cat("make-random (--refiner-layers ", o.refiner_layers, ")"));
  l.fp8_experts = o.fp8_experts;
  return l;
}

std::string random_model_config_json(const RandomModelLayout& layout) {
  ojson j = ojson::parse(tiny_config_json());
  j["arch_config"] = dit_arch_json(layout.dit);
  if (layout.refiner_layers > 0)
    j["magi2_refiner_arch_config"] = refiner_arch_json(layout.refiner);
  else
    j.erase("magi2_refiner_arch_config");
  j["evaluation_config"]["num_inference_steps"] = Magi2Config::release().eval.num_inference_steps;
  // Keep the official key order: engine, arch, refiner arch, evaluation.
  ojson out;
  for (const char* k : {"engine_config", "arch_config", "magi2_refiner_arch_config", "evaluation_config"})
    if (j.contains(k)) out[k] = j[k];
  return out.dump(2) + "\n";
}

RandomModelSummary make_random_model(const std::string& dir, const RandomModelLayout& layout, uint64_t seed,
                                     const std::function<void(const std::string&)>& log) {
  RandomModelSummary sum;
  std::vector<std::string> subdirs = {"preview", "text_encoder", "turbo_vae", "stable-audio-open-1.0", "vae"};
  if (layout.refiner_layers > 0) subdirs.push_back("refiner");
  build_model_folder(
      dir, subdirs,
      [&](const fs::path& tmp) {
        // Each part timed and reported as it completes (a 2-layer folder is ~16 GB).
        auto part = [&](const std::string& name, const std::function<void()>& write) {
          const auto t0 = std::chrono::steady_clock::now();
          write();
          RandomModelSummary::Part p{name, folder_bytes((tmp / name).string()), seconds_since(t0)};
          if (log) log(str_cat("make-random: ", name, "/ ", p.bytes, " bytes in ", p.seconds, " s"));
          sum.parts.push_back(p);
        };
        write_file_atomic((tmp / "config.json").string(), random_model_config_json(layout));
        part("preview", [&] {
          const int n = layout.dit.num_layers;
          DitTensorMaker make{seed, {}};
          write_sharded_checkpoint(
              (tmp / "preview").string(),
              dit_tensor_specs(layout.dit, layout.fp8_experts ? ExpertWeights::FP8 : ExpertWeights::BF16),
              [&](const std::string& name) { return layer_shard_name(name, n); },
              [&](const DitTensorSpec& s) { return make(s); }, false);
        });
        part("text_encoder", [&] {
          write_text_encoder((tmp / "text_encoder").string(), text_encoder_config_json(layout.text), seed, false);
        });
        part("turbo_vae", [&] { write_tiny_turbo_vae((tmp / "turbo_vae").string(), seed, layout.turbo_vae); });
        part("stable-audio-open-1.0",
             [&] { write_tiny_sao_vae((tmp / "stable-audio-open-1.0").string(), seed, layout.sao_channels); });
        part("vae", [&] { write_tiny_wan22_vae((tmp / "vae" / "Wan2.2_VAE.pth").string(), seed, layout.wan); });
        if (layout.refiner_layers > 0)
          part("refiner", [&] {
            std::vector<DitTensorSpec> specs;
            for (const auto& [name, sd] : RefinerWeights::specs(layout.refiner))
              specs.push_back({name, sd.first, sd.second});
            const int n = layout.refiner.num_layers;
            // The refiner draws by the same recipes, from its own seed stream (as make-tiny).
            write_sharded_checkpoint(
                (tmp / "refiner").string(), specs, [&](const std::string& name) { return layer_shard_name(name, n); },
                [&](const DitTensorSpec& s) { return random_dit_tensor(s, seed ^ 0x726566696e6572ull); }, false);
          });
      },
      "make-random");
  sum.folder_bytes = folder_bytes(dir);
  return sum;
}

}  // namespace magi2
