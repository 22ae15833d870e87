// What the engine is asked to do, shared by every front end (the magi2 CLI,
// `magi2 serve`, the C API in include/magi2.h): how to load a model
// (EngineOptions, once) and what to generate (GenerateParams, per request),
// plus the callbacks a request reports through. Plain values only: no front
// end state, no environment (front ends read their MAGI2_* mirrors and fill
// these structs). New request options go into GenerateParams with a default
// that keeps today's behaviour.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "core/tensor.h"
#include "engine/tiny_model.h"
#include "media/outputs.h"
#include "ops/backend_options.h"
#include "prompt_enhance/enhancer.h"

namespace magi2 {

/// How to load an engine (official model folder layout: spec magi2-pipeline.md §9).
struct EngineOptions {
  std::string model = kBuiltinTiny;  ///< model folder, or builtin:tiny (made on first use under `cache`)
  CacheEnv cache;                    ///< where builtin:tiny is cached
  std::string config;                ///< config JSON overriding MODEL/config.json ("" = MODEL's or the release one)
  std::string transformer;           ///< DiT checkpoint folder overriding MODEL/preview
  std::string text_encoder;          ///< Qwen3.5 folder overriding MODEL/text_encoder
  /// Prompts will be encoded: the text encoder folder is checked when the
  /// engine is made, before the DiT loads. False for features-only use
  /// (GenerateParams::text_features), where the model may lack text_encoder/.
  bool encodes_text = true;
  int threads = 0;                   ///< CPU threads, 0 = all
  std::string device = "auto";       ///< compute device: "auto" | "cpu" | "cuda"
  /// Where the 1080p refiner runs [--refiner-device]: "auto" (default: the
  /// DiT's device, CUDA when the DiT runs there, with the tensor-core
  /// block-sparse attention; checked on the H200, docs/refiner.md) or "cpu"
  /// (the reference backend whatever `device` says). On a GPU its weights
  /// upload in the refine phase, and the memory plan frees the DiT first when
  /// both do not fit the budget (engine/memory_plan.h).
  std::string refiner_device = "auto";
  /// Where the Qwen3.5 text encoder runs [--text-encoder-device]: "auto"
  /// (default: the DiT's device, its weights uploaded there; the CUDA text ops
  /// are checked on the H200, docs/cuda.md) or "cpu" (the reference backend).
  std::string text_encoder_device = "auto";
  /// Where the codecs run [--decoder-device]: "auto" (default: the DiT's
  /// device: the TurboVAE and Stable Audio Open decoders and the Wan2.2 image
  /// encoder upload their weights there, beside the DiT when they fit the
  /// budget, else after the DiT and the refiner are freed; the audio resample
  /// stays on the host) or "cpu" (the reference backend).
  std::string decoder_device = "auto";
  /// Bytes the DiT's device may hold (`--max-device-memory`); 0 = the GPU's
  /// free memory (CUDA backend) or the host's RAM (CPU backend). A request
  /// whose memory plan (engine/memory_plan.h) exceeds it is refused before
  /// loading; stages that do not fit together are not resident together (the
  /// text encoder, the DiT, the refiner, the codecs: engine/memory_plan.h).
  uint64_t max_device_memory = 0;
  /// Routed expert weights [--weights]: "auto" (as stored), "bf16", or
  /// "fp8-experts" (e4m3 with 128 x 128 block scales; a bf16 checkpoint is
  /// quantised at load). docs/fp8.md.
  std::string weights = "auto";
  /// Which router bias selects the experts [--router-bias, env
  /// MAGI2_ROUTER_BIAS_SOURCE]: "ema" (router.expert_bias_ema, as the official
  /// loader) or "main" (router.expert_bias; a diagnostic). DitWeights::router_bias_from_ema.
  std::string router_bias = "ema";
  /// How FP8 routed experts compute [--fp8-compute, env MAGI2_FP8_COMPUTE]:
  /// "w8a16" (bf16 activations, the default) or "w8a8" (e4m3 activations in
  /// 1 x 128 groups); both backends. DitWeights::fp8_compute, docs/fp8.md.
  std::string fp8_compute = "w8a16";
  /// How the DiT's self-attention computes [--attention-compute, env
  /// MAGI2_ATTENTION_COMPUTE]: "bf16" (the default, the official rounding
  /// points) or "fp8" (e4m3 Q, K, V and P, bf16 output; an experiment; CUDA
  /// needs head dim 128); both backends. DitWeights::fp8_attention, docs/fp8.md.
  std::string attention_compute = "bf16";
  /// How the DiT's dense linears compute [--linear-compute, env
  /// MAGI2_LINEAR_COMPUTE]: "bf16" (the default) or "fp8" (W8A8: the weights
  /// quantised at load with 128 x 128 block scales, the activations per 1 x 128
  /// group; an experiment; CUDA needs widths that are multiples of 128); both
  /// backends. DitWeights::quantize_linears, LinearParams::w_scale, docs/fp8.md.
  std::string linear_compute = "bf16";
  /// Where the layer weights of the DiT and of the text encoder live
  /// [--offload, env MAGI2_OFFLOAD]: "none" (all resident on the device) or
  /// "layerwise" (CUDA: each model's layer weights stay in pinned host memory
  /// and stream into two device layer slots, overlapped with compute; a no-op
  /// for a model on the CPU backend). LayerOffload, docs/memory.md.
  std::string offload = "none";
  /// Kernel choices of the CUDA backend (--cuda-attention); ignored on the CPU.
  CudaOptions cuda;
  /// Prompt enhancement for requests with GenerateParams::enhance_prompt: the
  /// OpenAI-compatible endpoint (empty base_url: none, such requests are refused)
  /// and the request settings (model, template, max_tokens; prompt and image
  /// are each request's). docs/prompt-enhancement.md.
  pe::Endpoint prompt_enhancement;
  pe::EnhanceRequest prompt_enhancement_request;
};

/// Documented ranges of the numeric request options (CLI flags in brackets),
/// checked by validate() before anything is loaded, so no schedule, plan or
/// buffer is ever sized from an unchecked number.
struct Limits {
  static constexpr int kMaxSteps = 1000;          ///< [--num-inference-steps] 1..1000 (release: 100)
  static constexpr int64_t kMaxSide = 2048;       ///< [--width/--height] 16..2048, multiples of 16
  static constexpr double kMaxSeconds = 60;       ///< [--seconds] (0, 60] (release: 10)
  /// Largest clip: width x height x seconds (3x the 540p 10 s release clip).
  static constexpr double kMaxPixelSeconds = 896.0 * 512.0 * 30.0;
  static constexpr int64_t kMaxOutputSide = 8192;  ///< [--output-width/--output-height] 0 (decoded size) or 1..8192
  static constexpr double kMaxGuidance = 100;     ///< guidance scales: finite, |g| <= 100
  static constexpr int kMaxThreads = 1024;        ///< [--threads] 0 (all cores)..1024
  static constexpr int64_t kMaxRefinerSide = 4096;  ///< [--refiner-width/--refiner-height] 16..4096, multiples of 16
  /// Largest refined clip: refiner width x height x seconds (3x the 1080p 10 s release clip).
  static constexpr double kMaxRefinerPixelSeconds = 1920.0 * 1088.0 * 30.0;
};

/// One generation request. Defaults are the CLI's.
struct GenerateParams {
  /// Names this request in error messages ("--prompt", "sample 3", "request vid_...").
  std::string label = "--prompt";
  /// Text prompt (plain or the official enhanced JSON); must hold some
  /// non-whitespace text unless `text_features` is given (validate()).
  std::string prompt;
  /// Precomputed text features (safetensors raw_txt_feat, raw_null_txt_feat, optional
  /// special_token) used instead of encoding `prompt` and the negative prompt.
  std::string text_features;
  std::string negative_prompt;  ///< "" = the official default negative prompt
  bool truncate = false;        ///< cut prompts over the tokenizer limit (else an Error)
  std::string image;            ///< I2VA reference image (PNG/JPEG); "" = text-to-video
  /// 272p (448x256), 540p (896x512), or 1080p: the preview at 896x512 (or width x height), then
  /// the refiner to refiner_width x refiner_height at 25 fps (docs/refiner.md).
  std::string resolution = "272p";
  int64_t width = 0, height = 0;    ///< preview pixels, multiples of 16; both or neither (0 = from resolution)
  int64_t refiner_width = 1920, refiner_height = 1088;  ///< 1080p: refiner output pixels, multiples of 16
  int refiner_steps = -1;           ///< 1080p: refiner steps; -1 = the config's magi2_refiner_num_inference_steps
  /// Refine these saved preview latents (final_latent, final_audio_latent of
  /// --save-latents) instead of denoising: `magi2 refine --latents`. Needs 1080p.
  std::string refine_from;
  double seconds = 10.0;            ///< clip length
  uint64_t seed = 42;               ///< Philox noise seed
  int steps = -1;                   ///< denoising steps; -1 = the config's num_inference_steps
  std::optional<double> video_guidance_scale;  ///< unset = the config's video_txt_guidance_scale
  std::optional<double> audio_guidance_scale;  ///< unset = the config's audio_txt_guidance_scale
  std::string noise;             ///< testing: initial noise loop_init_latent, loop_init_audio_latent
  std::string routing_override;  ///< testing: per-step expert selection loop_l{layer}_moe_topk_idx
  OutputPlan outputs;            ///< decoded outputs (MP4, frames, WAV); none = no decode
  std::string thumbnail_path;    ///< PNG of the first decoded frame (needs a decoded output); "" = not written
  std::string latents_path;      ///< final latents (safetensors); "" = not written
  std::string metrics_path;      ///< metrics JSON; "" = not written
  /// Rewrite `prompt` through EngineOptions::prompt_enhancement first (T2V, or
  /// I2V with `image`); the enhanced Markdown is what the text encoder gets.
  bool enhance_prompt = false;
  /// The prompt the text encoder receives (after enhancement), written
  /// atomically with the other outputs: the text verbatim, or for a .json path
  /// a one-sample `--samples` file [{"prompt", "image"?}] that replays it
  /// byte for byte. "" = not written.
  std::string save_prompt_path;

  /// Width and height in pixels: width/height when given, else the resolution's.
  int64_t pixel_width() const;
  int64_t pixel_height() const;
  /// Whether the refiner stage runs (resolution 1080p).
  bool refines() const { return resolution == "1080p"; }
  /// Size of the decoded frames: the refiner's for 1080p, else the preview's.
  int64_t decoded_width() const { return refines() ? refiner_width : pixel_width(); }
  int64_t decoded_height() const { return refines() ? refiner_height : pixel_height(); }
  /// Whether the request decodes (some of MP4, frames, WAV asked for).
  bool decodes() const { return !outputs.mp4_path.empty() || !outputs.frames_dir.empty() || !outputs.wav_path.empty(); }
};

/// Checks a config before anything is loaded. Errors (one line naming the
/// option): threads outside [0, Limits::kMaxThreads], an unknown device,
/// weights, router bias, offload or CUDA kernel choice.
void validate(const EngineOptions& c);

/// Checks a request before any model work: a prompt that is empty or only
/// whitespace when the request encodes one (prompt_problem; named by
/// `label`), resolution, width/height pairing,
/// every number within Limits (steps: -1 = the config's, else 1..kMaxSteps),
/// guidance scales finite, every output path distinct from the inputs
/// (--image, --text-features, --noise, --routing-override) and from the other
/// outputs, an output resize only with
/// decoded outputs, the output plan (check_output_plan), and that the
/// reference image exists. The clip length is checked against the model's
/// frame rate by Engine::prepare. Errors: one line naming the CLI flag at fault.
void validate(const GenerateParams& p);

/// Progress after one denoising step.
struct Progress {
  int step = 0;            ///< 1-based number of the step just done
  int steps = 0;           ///< total steps of the request
  int64_t timestep = 0;    ///< scheduler timestep of the step
  double step_ms = 0;      ///< wall time of the step
  double elapsed_ms = 0;   ///< since the loop started
  double eta_s = 0;        ///< estimated seconds to the end of the loop
};

/// A preview of the current latents: the middle latent frame decoded to one
/// RGB frame, as PNG bytes.
struct Preview {
  int step = 0;     ///< 1-based step after which it was taken
  std::string png;  ///< PNG file bytes
};

/// How a request reports back. Every member may be empty. Called on the
/// thread that runs Engine::run; exceptions thrown by a callback fail the request.
struct GenerateCallbacks {
  std::function<void(const std::string&)> on_log;      ///< one human-readable line (no newline)
  std::function<void(const Progress&)> on_progress;    ///< after every step
  /// Polled at every step boundary; true stops the loop: nothing is written
  /// and the outcome says cancelled.
  std::function<bool()> should_cancel;
  int preview_every = 0;                               ///< > 0: a preview every N steps (needs the decoders)
  std::function<void(const Preview&)> on_preview;
};

/// What a finished request produced.
struct GenerateOutcome {
  bool cancelled = false;       ///< stopped by should_cancel: no output was written
  Shape latent_shape;           ///< final video latent [1, 48, T, h, w]
  Shape audio_latent_shape;     ///< final audio latent [1, La, 64]
  bool decoded = false;         ///< outputs were decoded and written (report valid)
  OutputReport report;          ///< digests, shapes and sizes of the written outputs
  int steps = 0;                ///< steps run
  double denoise_ms = 0;        ///< wall time of the loop
  int refiner_steps = 0;        ///< refiner steps run (1080p)
  double refine_ms = 0;         ///< wall time of the refiner stage
  double total_ms = 0;          ///< wall time of the whole run
};

}  // namespace magi2
