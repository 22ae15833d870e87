#include "weights_option.h"

#include <CLI/CLI.hpp>

#include "choice_option.h"

namespace magi2::cli {

CLI::Option* add_weights_option(CLI::App* app, std::string& dst) {
  return add_choice_option(app, "--weights", dst,
                           "routed expert weights: auto (as the checkpoint stores them), bf16, or fp8-experts (e4m3 "
                           "with 128x128 block scales, quantised at load from bf16; W8A16)",
                           {"auto", "bf16", "fp8-experts"}, "MAGI2_WEIGHTS");
}

CLI::Option* add_router_bias_option(CLI::App* app, std::string& dst) {
  return add_choice_option(app, "--router-bias", dst,
                           "router bias that selects the experts: ema (router.expert_bias_ema, as the official "
                           "loader) or main (router.expert_bias; diagnostic)",
                           {"ema", "main"}, "MAGI2_ROUTER_BIAS_SOURCE");
}

CLI::Option* add_cuda_attention_option(CLI::App* app, std::string& dst) {
  return add_choice_option(app, "--cuda-attention", dst,
                           "CUDA attention kernel: auto (the own Hopper flash kernel for the DiT, cuDNN SDPA for "
                           "other shapes it takes, else the fp32 kernel), cudnn (cuDNN SDPA where it applies, else "
                           "the fp32 kernel) or fp32 (always the fp32 kernel, the parity oracle)",
                           {"auto", "cudnn", "fp32"}, "MAGI2_CUDA_ATTENTION");
}

CLI::Option* add_text_encoder_device_option(CLI::App* app, std::string& dst) {
  return add_choice_option(app, "--text-encoder-device", dst,
                           "where the Qwen3.5 text encoder runs: auto (the --device backend) or cpu (the reference "
                           "backend)",
                           {"cpu", "auto"}, "MAGI2_TEXT_ENCODER_DEVICE");
}

CLI::Option* add_decoder_device_option(CLI::App* app, std::string& dst) {
  return add_choice_option(app, "--decoder-device", dst,
                           "where the codecs run (TurboVAE, Stable Audio Open, the Wan2.2 image encoder): auto (the "
                           "--device backend, default; on CUDA loaded after the DiT and the refiner are freed when "
                           "they do not fit beside them) or cpu (the reference backend)",
                           {"cpu", "auto"}, "MAGI2_DECODER_DEVICE");
}

CLI::Option* add_fp8_compute_option(CLI::App* app, std::string& dst) {
  return add_choice_option(app, "--fp8-compute", dst,
                           "how FP8 routed experts compute: w8a16 (bf16 activations) or w8a8 (e4m3 activations in "
                           "1x128 groups, blockwise-scaled FP8 GEMMs); ignored for bf16 experts",
                           {"w8a16", "w8a8"}, "MAGI2_FP8_COMPUTE");
}

CLI::Option* add_attention_compute_option(CLI::App* app, std::string& dst) {
  return add_choice_option(app, "--attention-compute", dst,
                           "how the DiT's self-attention computes: bf16 (the official rounding points) or fp8 (e4m3 "
                           "Q, K, V and P, bf16 output: an experiment, 5-9 % rel-RMS per call on random inputs, "
                           "docs/fp8.md; CUDA needs head dim 128)",
                           {"bf16", "fp8"}, "MAGI2_ATTENTION_COMPUTE");
}

CLI::Option* add_linear_compute_option(CLI::App* app, std::string& dst) {
  return add_choice_option(app, "--linear-compute", dst,
                           "how the DiT's dense linears (the attention projections (qkv, out), MoE split/merge, "
                           "shared experts, dense MLP; not the output gate) compute: bf16 (the official rounding "
                           "points) or fp8 (W8A8: weights quantised at load with 128 x 128 block scales, activations "
                           "per 1 x 128 group: an experiment, docs/fp8.md; CUDA needs widths that are multiples of "
                           "128)",
                           {"bf16", "fp8"}, "MAGI2_LINEAR_COMPUTE");
}

CLI::Option* add_moe_max_rows_option(CLI::App* app, int64_t& dst) {
  return app
      ->add_option("--moe-max-rows", dst,
                   "routed rows (tokens x heads x top-k) one routed-experts pass takes on CUDA; more run in token "
                   "passes (same bytes, less workspace: e.g. 1000000 for 540p with the whole model in FP8); the CPU "
                   "backend ignores it, as it does --cuda-attention")
      ->envname("MAGI2_MOE_MAX_ROWS")
      ->check(CLI::Range(int64_t{1}, (int64_t{1} << 31) - 1))
      ->capture_default_str();
}

CLI::Option* add_offload_option(CLI::App* app, std::string& dst) {
  return add_choice_option(app, "--offload", dst,
                           "where the layer weights of the DiT and the text encoder live: none (all on the device) or "
                           "layerwise (CUDA: each model's layer weights stay in pinned host memory and stream into "
                           "two device layer slots while the previous layer computes; accepted and does nothing for a "
                           "model on the CPU backend)",
                           {"none", "layerwise"}, "MAGI2_OFFLOAD");
}

}  // namespace magi2::cli
