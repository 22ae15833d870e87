// The built-in tiny MAGI-2 model: a random-weight model in the official folder
// layout (spec magi2-pipeline.md §9) with every component (DiT, Qwen3.5 text
// encoder, TurboVAE, Oobleck audio VAE, Wan2.2 VAE), for smoke tests and demos
// without the 307 GB release checkpoint. The DiT keeps every structural
// feature of shared/golden/dit_tiny/config.json (mm layers, multi-head MoE,
// mHC, gating, sinks) at narrower widths; weights are drawn like the golden
// init recipe (shared/golden/README.md "Checkpoint (ckpt/)") from our own
// generator.
#pragma once

#include <cstdint>
#include <string>

#include "models/magi2_dit/config.h"
#include "models/magi2_dit/weights.h"

namespace magi2 {

/// The name that resolve_model() maps to the cached tiny model folder.
inline constexpr const char* kBuiltinTiny = "builtin:tiny";

/// The built-in tiny configuration: the layer kinds of
/// shared/golden/dit_tiny/config.json (4 layers, mm_layers [0,3], MoE layers
/// [1,2], 4 MoE heads x 16 experts, top-4, mHC 4 streams, text_in_channels 64,
/// the preview evaluation_config) at hidden 64 = 2 heads x 32, experts 32,
/// shared 32, modality-specific 48, and 4 sampling steps, so the default 10 s
/// 272p clip runs in seconds per step on a CPU; engine_config.load =
/// "preview". Built from an embedded JSON text: no file is read. `source` is
/// "<built-in tiny config>". Never throws.
Magi2Config tiny_config();

/// The tiny configuration in the official JSON layout (engine_config,
/// arch_config, evaluation_config; 2-space indented, trailing newline): what
/// make_tiny_model() writes to DIR/config.json.
std::string tiny_config_json();

/// Writes the tiny model folder `dir`:
///   dir/config.json                                  tiny_config_json()
///   dir/preview/model-00001-of-00002.safetensors      adapters + first half of the layers
///   dir/preview/model-00002-of-00002.safetensors      second half of the layers
///   dir/preview/model.safetensors.index.json          {"metadata": {"total_size"}, "weight_map"}
///   dir/refiner/{model-0000{1,2}-of-00002.safetensors, model.safetensors.index.json}
///                                                    the tiny 1080p refiner (magi2_refiner_arch_config of
///                                                    config.json: 4 layers, hidden 64, GQA 2/1; docs/refiner.md)
///   dir/text_encoder/{config.json, model.safetensors, tokenizer.json, tokenizer_config.json}
///                                                    the tiny Qwen3.5 text encoder (tiny_text_encoder.h)
///   dir/turbo_vae/{TurboV3-Wan22-TinyShallow_7_7.json, checkpoint.ckpt}   TurboVAE decoder (torch.save zip)
///   dir/stable-audio-open-1.0/{model_config.json, model.safetensors}      Oobleck audio VAE
///   dir/vae/Wan2.2_VAE.pth                                                 Wan2.2 VAE (I2VA image encoder)
/// with every tensor of dit_tensor_specs(tiny_config().arch) in its official
/// dtype. Values are seeded random, identical for a given `seed` on every
/// machine (own SplitMix64 + Box-Muller, no std distributions) and per tensor
/// seeded from FNV-1a(name) ^ seed, so they do not depend on write order;
/// scales follow the golden init recipe; pre_adapter.rope.bands is the
/// analytic 10000^(-b/nb) (spec magi2-dit.md §2.3).
/// Atomic: built under `dir`.tmp.<pid>.<n>, then renamed to `dir`; a missing
/// parent folder is created. Errors (magi2::Error, one line naming the path):
/// `dir` exists and is not an empty folder; a file cannot be written; the
/// final rename fails (e.g. another process created `dir` meanwhile). On error
/// the temporary folder is removed and `dir` is untouched.
void make_tiny_model(const std::string& dir, uint64_t seed);

/// One seeded random DiT tensor in its official dtype, drawn by the tiny
/// model's init recipe (scales by name; make_tiny_model() uses it). `fast`:
/// values from a shared pool of normals at a per-tensor offset (release-width
/// weights for `magi2 bench` in seconds; not independent draws). Error for a
/// tensor name without a recipe.
Tensor random_dit_tensor(const DitTensorSpec& t, uint64_t seed, bool fast = false);

/// The standard deviation of random_dit_tensor's recipe for `t` (0 for the
/// deterministic RoPE bands): device-side generators match the spread with it.
double random_dit_tensor_std(const DitTensorSpec& t);

/// Where the built-in models may be cached. The library never reads the
/// environment: front ends fill this from $MAGI2_CACHE_DIR, $XDG_CACHE_HOME and
/// $HOME (tools/magi2/cache_env.h); an API user may set `cache_dir` alone.
/// Empty = not set.
struct CacheEnv {
  std::string cache_dir;       ///< explicit folder ($MAGI2_CACHE_DIR): used as is, must be creatable
  std::string xdg_cache_home;  ///< $XDG_CACHE_HOME: the cache is its magi2/ subfolder
  std::string home;            ///< $HOME: the cache is its .cache/magi2/ subfolder
};

/// The folder of the built-in models' cache: env.cache_dir (must be
/// creatable, else Error naming it as MAGI2_CACHE_DIR); else
/// env.xdg_cache_home/magi2, else env.home/.cache/magi2, falling back to
/// /tmp/magi2-cache when neither is set or creatable. The folder is created.
/// Error when even the fallback fails.
std::string model_cache_dir(const CacheEnv& env);

/// Number of tensors and tensor-data bytes (= the index's metadata.total_size)
/// of the folder make_tiny_model() writes. Never throws.
struct TinyModelSize {
  size_t num_tensors = 0;
  size_t num_bytes = 0;
};
TinyModelSize tiny_model_size();

/// Maps a --model value to a folder: "builtin:tiny" -> model_cache_dir(env) +
/// "/tiny-v4", created with make_tiny_model(..., seed 0) on first use
/// (race-safe: when another process wins the final rename, its folder is
/// used). Any value not starting with "builtin:" is returned unchanged.
/// Errors: "builtin:<other>" (the message lists the known names); a cache
/// folder that exists but is not a complete tiny model (names it, says to
/// remove it); any make_tiny_model error.
std::string resolve_model(const std::string& model, const CacheEnv& env);

}  // namespace magi2
