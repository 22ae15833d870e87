// Model-loading flags shared by the subcommands: `--weights` (generate,
// forward, bench, serve; docs/fp8.md), `--router-bias` (generate, refine,
// forward, inspect, serve), `--cuda-attention` (generate, refine, forward,
// bench, serve; docs/cuda.md), `--text-encoder-device` (generate, refine,
// encode-text, serve), `--decoder-device` (generate, refine, serve),
// `--fp8-compute` (generate, forward, bench, serve; docs/fp8.md), `--offload`
// (generate, bench, serve; docs/memory.md) and `--moe-max-rows` (generate, bench, serve). Each has its MAGI2_* env mirror here, so the library itself
// reads no environment.
#pragma once

#include <cstdint>
#include <string>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace magi2::cli {

/// Adds `--weights auto|bf16|fp8-experts` (env MAGI2_WEIGHTS) writing to `dst`:
/// the routed expert format (ExpertWeights); other values are refused at parse time.
CLI::Option* add_weights_option(CLI::App* app, std::string& dst);

/// Adds `--router-bias ema|main` (env MAGI2_ROUTER_BIAS_SOURCE) writing to
/// `dst` (EngineOptions::router_bias); other values are refused at parse time.
CLI::Option* add_router_bias_option(CLI::App* app, std::string& dst);

/// Adds `--cuda-attention auto|fp32` (env MAGI2_CUDA_ATTENTION) writing to
/// `dst` (CudaOptions::attention); other values are refused at parse time.
CLI::Option* add_cuda_attention_option(CLI::App* app, std::string& dst);

/// Adds `--moe-max-rows N` (env MAGI2_MOE_MAX_ROWS) writing to `dst`
/// (CudaOptions::moe_max_rows): the routed rows (tokens x heads x top-k) of
/// one routed-experts pass on CUDA; a call over more runs in token passes with
/// the same bytes and less workspace. Values outside [1, 2^31) are refused.
CLI::Option* add_moe_max_rows_option(CLI::App* app, int64_t& dst);

/// Adds `--text-encoder-device cpu|auto` (env MAGI2_TEXT_ENCODER_DEVICE)
/// writing to `dst` (EngineOptions::text_encoder_device: cpu = the reference
/// backend, auto = the --device backend); other values are refused at parse time.
CLI::Option* add_text_encoder_device_option(CLI::App* app, std::string& dst);

/// Adds `--decoder-device cpu|auto` (env MAGI2_DECODER_DEVICE) writing to
/// `dst` (EngineOptions::decoder_device: cpu = the reference backend, auto =
/// the --device backend); other values are refused at parse time.
CLI::Option* add_decoder_device_option(CLI::App* app, std::string& dst);

/// Adds `--fp8-compute w8a16|w8a8` (env MAGI2_FP8_COMPUTE) writing to `dst`
/// (EngineOptions::fp8_compute, DitWeights::fp8_compute); other values are refused at parse time.
CLI::Option* add_fp8_compute_option(CLI::App* app, std::string& dst);

/// Adds `--attention-compute bf16|fp8` (env MAGI2_ATTENTION_COMPUTE) writing to
/// `dst` (EngineOptions::attention_compute, DitWeights::fp8_attention); other
/// values are refused at parse time.
CLI::Option* add_attention_compute_option(CLI::App* app, std::string& dst);

/// Adds `--linear-compute bf16|fp8` (env MAGI2_LINEAR_COMPUTE) writing to `dst`
/// (EngineOptions::linear_compute, DitWeights::quantize_linears); other values
/// are refused at parse time.
CLI::Option* add_linear_compute_option(CLI::App* app, std::string& dst);

/// Adds `--offload none|layerwise` (env MAGI2_OFFLOAD) writing to `dst`
/// (EngineOptions::offload, DitOffload); other values are refused at parse time.
CLI::Option* add_offload_option(CLI::App* app, std::string& dst);

}  // namespace magi2::cli
