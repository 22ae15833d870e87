// A random-weight model folder at the release widths (`magi2 make-random`):
// the official layout and names of the 307 GB checkpoint (spec
// magi2-pipeline.md §9) with every width of the release (DiT hidden 3072 x 4
// mHC streams, 12 MoE heads x 256 experts; Qwen3.5-27B text encoder; TurboVAE,
// Stable Audio Open and Wan2.2 VAEs) and only the layer counts cut, so
// `magi2 generate` runs prompt -> clip through the release-shaped kernels and
// memory plan without the real weights. Weights are seeded random by the tiny
// model's per-name recipes (tiny_model.h, tiny_text_encoder.h, the codecs'
// tiny.h), which keep activations O(1) at any width; the clip is noise.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/magi2_dit/config.h"
#include "models/magi2_refiner/config.h"
#include "models/qwen35/text_config.h"
#include "models/turbovae/config.h"
#include "models/wan22_vae/tiny.h"

namespace magi2 {

/// The `magi2 make-random` choices.
struct RandomModelOptions {
  int layers = 2;          ///< DiT layers, 1..40 (random_model_dit_arch says which release layers)
  int text_layers = 4;     ///< Qwen3.5 layers, 3..64 (the features are hidden_states[-3]: M - 2 layers run)
  int refiner_layers = 0;  ///< 1080p refiner layers, 0..30; 0 = no refiner/ folder (272p/540p need none)
  bool fp8_experts = false;  ///< routed experts in F8_E4M3 + 128 x 128 block scales (as `magi2 quantize`)
};

/// Every component's configuration of a random model folder.
struct RandomModelLayout {
  DitArch dit;                      ///< the release arch with `layers` layers
  std::vector<int> release_layers;  ///< for each kept layer, the release layer it stands for
  qwen35::TextConfig text;          ///< the text encoder (widths, layer kinds)
  TurboVaeConfig turbo_vae;
  int64_t sao_channels = 0;         ///< Stable Audio Open base width
  Wan22VaeLayout wan;
  int refiner_layers = 0;           ///< 0: no refiner/
  RefinerArch refiner;              ///< used when refiner_layers > 0
  bool fp8_experts = false;
};

/// The release arch cut to `layers` layers, keeping the release's layer kinds
/// in its order (mm layers at both ends, MoE between): m = min(4, layers / 2)
/// mm layers, ceil(m / 2) first (release 0, 1) and floor(m / 2) last (38, 39),
/// MoE layers in between (release 2, 3, ...). So 1 = one MoE layer, 2 = mm +
/// MoE, 4 = mm, MoE, MoE, mm, 40 = the release. Unlike `magi2 bench
/// --layers` (the first N layers: no MoE layer below 5), every cut from 2 on
/// runs both kinds. `release_layers` (optional) receives the release index of
/// each kept layer. Error for layers outside 1..40.
DitArch random_model_dit_arch(int layers, std::vector<int>* release_layers = nullptr);

/// The release-width layout of `o` (validated). Text layers: the Qwen3.5-27B
/// kinds (every 4th full attention), except that when none of the M - 2
/// layers the features use is full attention and they are at least 2, the
/// last of them is, so both kinds run. Errors: a count outside its range
/// (naming the flag: --layers, --text-layers, --refiner-layers).
RandomModelLayout random_model_layout(const RandomModelOptions& o);

/// config.json of the folder, in the official layout (engine_config,
/// arch_config, magi2_refiner_arch_config when the layout has a refiner,
/// evaluation_config: the preview's, as tiny_config_json(), with the
/// release's num_inference_steps). Magi2Config::from_json_text reads
/// `layout.dit` back.
std::string random_model_config_json(const RandomModelLayout& layout);

/// What make_random_model wrote.
struct RandomModelSummary {
  uint64_t folder_bytes = 0;  ///< every file of the folder
  struct Part {
    std::string name;  ///< "preview", "text_encoder", "turbo_vae", "stable-audio-open-1.0", "vae", "refiner"
    uint64_t bytes = 0;
    double seconds = 0;
  };
  std::vector<Part> parts;
};

/// Writes the model folder `dir`:
///   dir/config.json                                   random_model_config_json(layout)
///   dir/preview/model-000NN-of-000MM.safetensors      the DiT, one shard per layer + one for the
///                                                     adapters, and model.safetensors.index.json
///   dir/text_encoder/{config.json, model.safetensors, tokenizer.json, tokenizer_config.json}
///                                                     (text_encoder_config_json(layout.text); the
///                                                     tiny model's generated tokenizer: its ids fit
///                                                     any vocabulary)
///   dir/turbo_vae/{TurboV3-Wan22-TinyShallow_7_7.json, checkpoint.ckpt}
///   dir/stable-audio-open-1.0/{model_config.json, model.safetensors}
///   dir/vae/Wan2.2_VAE.pth
///   dir/refiner/ (shards + index, only with layout.refiner_layers > 0)
/// Values: element i of a tensor depends on (seed, name, i) alone (the tiny
/// recipes), generated on every core; each safetensors tensor is made, written
/// and dropped before the next (the largest, a bf16 expert bank, is ~2 GB);
/// the TurboVAE, Oobleck and Wan2.2 files are built in memory one at a time
/// (the 2.8 GB Wan2.2 .pth sets the peak: ~8.5 GB RSS, measured with N = 1).
/// Time: ~40 s for N = 2, M = 4 on 16 cores (docs/perf.md), ~5 min on 2.
/// `log` (optional) gets one line per finished part.
/// Atomic as make_tiny_model (a temporary sibling folder renamed at the end;
/// files are not fsynced one by one). Errors (one line naming the path): `dir`
/// exists and is not empty, a file cannot be written (e.g. the disk is full:
/// a 2-layer folder is ~16 GB), the final rename fails.
RandomModelSummary make_random_model(const std::string& dir, const RandomModelLayout& layout, uint64_t seed,
                                     const std::function<void(const std::string&)>& log = {});

}  // namespace magi2
