// The short latents-only request of the memory-plan tests (test_memory_plan,
// test_offload, test_text_offload): 64x32 px, 0.4 s, one step, on the
// built-in tiny model, and the engine options those tests plan with.
#pragma once

#include <string>

#include "engine/params.h"
#include "engine/tiny_model.h"

namespace magi2::test {

/// Writes DIR/NAME.safetensors (latents) and DIR/NAME.json (metrics).
inline GenerateParams small_request(const std::string& dir, const std::string& name) {
  GenerateParams p;
  p.prompt = "A red fox trots through fresh snow.";
  p.seconds = 0.4;
  p.width = 64;
  p.height = 32;
  p.steps = 1;
  p.latents_path = dir + "/" + name + ".safetensors";
  p.metrics_path = dir + "/" + name + ".json";
  return p;
}

/// The built-in tiny model with its cache in `cache_dir`, 2 threads, the text
/// encoder on `text_encoder_device` and `--offload offload`.
inline EngineOptions tiny_engine_options(const std::string& cache_dir, const std::string& text_encoder_device,
                                         const std::string& offload) {
  EngineOptions o;
  o.model = kBuiltinTiny;
  o.cache.cache_dir = cache_dir;
  o.threads = 2;
  o.text_encoder_device = text_encoder_device;
  o.offload = offload;
  return o;
}

}  // namespace magi2::test
