// The golden denoising loop's request (shared/golden README
// "sampler.safetensors"), shared by test_generate_golden and test_fp8_golden.
#pragma once

#include "golden/dit_fixture.h"
#include "pipeline/generate.h"

namespace magi2::test {

/// The official sampler run of the tiny golden model as a GenerateRequest: a
/// 0.4 s clip at 96x64 (2 x 4 x 6 latent, 10 audio frames), the golden text
/// features, as many steps as `sampler` has loop_latent_after_step rows, the
/// config's shift, the official initial noise, and each MoE layer's expert
/// selection forced per step (loop_l{layer}_moe_topk_idx). on_step is unset.
inline GenerateRequest golden_loop_request(const GoldenDit& g, const SafetensorsFile& sampler) {
  GenerateRequest req;
  req.latent = latent_shape_for_clip(0.4, 96, 64);
  req.text_cond = g.io->tensor("raw_txt_feat");
  req.text_uncond = g.io->tensor("raw_null_txt_feat");
  req.num_steps = static_cast<int>(sampler.tensor("loop_latent_after_step").size(0));
  req.shift = g.config.eval.shift;
  req.init_latent = sampler.tensor("loop_init_latent");
  req.init_audio_latent = sampler.tensor("loop_init_audio_latent");
  req.routing_override.resize(g.config.arch.num_layers);
  for (int l : g.config.arch.moe_layers)
    req.routing_override[l] = sampler.tensor("loop_l" + std::to_string(l) + "_moe_topk_idx");
  return req;
}

}  // namespace magi2::test
