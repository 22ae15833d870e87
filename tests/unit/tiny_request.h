// The short latents-only request of the memory-plan tests (test_memory_plan,
// test_offload): 64x32 px, 0.4 s, one step, on the built-in tiny model.
#pragma once

#include <string>

#include "engine/params.h"

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

}  // namespace magi2::test
