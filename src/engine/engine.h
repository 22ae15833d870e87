// The MAGI-2 engine: a loaded model that turns GenerateParams into outputs.
// prompt (Qwen3.5 text encoder) [+ reference image (Wan2.2 VAE encoder)] ->
// denoising loop (pipeline/generate.h) -> latents -> TurboVAE + Oobleck decode
// -> MP4 / PNG frames / WAV with SHA-256 digests and a metrics JSON (official
// inference/pipeline/entry.py and inference_engine.py; spec
// magi2-pipeline.md). Each request's memory plan (engine/memory_plan.h) says
// which stages each phase may hold: when everything fits the budget, the DiT
// stays loaded between requests and the text encoder, refiner, decoders and
// image encoder are loaded on the first request that needs them and kept;
// else the engine frees what a phase does not hold before its stage loads
// (the DiT before the refiner, both before the codecs) and reloads it when a
// later phase needs it. Not thread-safe: one request at a time per engine
// (the DiT step owns the compute device); front ends serialise.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/memory_plan.h"
#include "engine/params.h"
#include "models/magi2_dit/config.h"
#include "pipeline/packing.h"

namespace magi2 {

/// A request with its conditioning computed (text features, latent size),
/// ready for Engine::run. Made by Engine::prepare; bound to that engine.
struct PreparedRequest {
  GenerateParams params;
  LatentShape latent;          ///< latent sizes of the clip
  Tensor cond, uncond;         ///< prompt and unconditional (negative prompt) features
  Tensor special_token;        ///< I2VA <Figure 1> token; undefined for T2VA
  int64_t prompt_tokens = 0;   ///< encoded prompt length (0 with text_features)
  double prompt_ms = 0;        ///< encoding time of the prompt
  double decoder_load_ms = 0;  ///< decoder loading this request caused (0 when already loaded)
  /// Set when params.enhance_prompt: the enhancement (params.prompt then holds its Markdown).
  std::optional<pe::EnhanceResult> enhancement;
  std::string prompt_before_enhancement;  ///< the request's own prompt when enhanced
  MemoryPlan memory_plan;      ///< the request's memory plan (checked against the budget); run() follows its phases
  size_t residency_log_begin = 0;  ///< Engine::residency_log() size when prepare() began (the metrics' events)
};

/// Weight loading progress: stage, bytes done, bytes in all.
using LoadProgress = std::function<void(const std::string& stage, uint64_t done, uint64_t total)>;

/// One load or release of a stage by the engine (Engine::residency_log).
struct ResidencyEvent {
  std::string stage;   ///< "text_encoder", "dit", "refiner", "decoders", "wan22_encoder"
  bool loaded = true;  ///< true = loaded (uploaded on a GPU), false = freed
  uint64_t bytes = 0;  ///< weight bytes of the stage (memory plan)
  double ms = 0;       ///< wall time of the load or release
};

class Engine {
 public:
  /// Validates `config`, resolves the model folder (builtin:tiny is made on
  /// first use), loads and binds the DiT and creates the compute backend.
  /// Errors (one line naming the file, folder or option): a missing model
  /// folder, a bad config or checkpoint, an unknown device.
  /// `on_load` (optional) reports weight loading: the stage ("dit") and bytes
  /// done and in all, on the constructing (or running) thread, a few times a
  /// second while a device upload runs.
  explicit Engine(const EngineOptions& config, LoadProgress on_load = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const Magi2Config& model_config() const;
  const std::string& model_root() const;       ///< the resolved model folder
  const std::string& transformer_dir() const;  ///< the DiT checkpoint folder used

  /// Validates `p` (validate()), plans its memory (refused with the plan's
  /// advice when it does not fit), loads the text encoder and encodes the
  /// prompt and the negative prompt (cached per negative prompt), and checks
  /// the other stages it needs without uploading them: the refiner bound to
  /// its checkpoint, the decoders loaded (beside the DiT when the plan holds
  /// them there, else once on the CPU), the Wan2.2 encoder's weights read.
  /// Nothing is denoised, so a bad request costs no step. Errors: as
  /// validate(), a missing component folder or bad checkpoint, a prompt over
  /// the limit, a clip too short, a plan over the budget.
  PreparedRequest prepare(const GenerateParams& p);

  /// Runs a prepared request: reference image encoding, the denoising loop,
  /// the refiner (1080p), then latents, decoded outputs and metrics (each
  /// written atomically). Each phase first frees the loaded stages its plan
  /// phase does not hold, then loads (uploads) its own.
  /// Cancelled (cb.should_cancel) runs write nothing. Errors: Error naming
  /// the file or tensor at fault; no output is half-written.
  GenerateOutcome run(const PreparedRequest& r, const GenerateCallbacks& cb = {});

  /// prepare() then run().
  GenerateOutcome generate(const GenerateParams& p, const GenerateCallbacks& cb = {});

  /// Unloads the text encoder (as the official code offloads it before the
  /// loop); the next prepare() that encodes a prompt loads it again.
  void release_text_encoder();

  /// Together: the DiT is loaded by the constructor and every stage stays
  /// loaded. Sequential (from the first request whose memory plan does not fit
  /// EngineOptions::max_device_memory with the text encoder and the DiT held
  /// together in one pool): the DiT is freed before the text encoder loads and the text
  /// encoder before the DiT loads again (in run()); encode every prompt first
  /// so that each loads once.
  Residency residency() const;
  /// The budget the plans are checked against, and where it came from.
  uint64_t memory_budget() const;
  /// Every stage load and release so far, in order (tests, diagnostics).
  const std::vector<ResidencyEvent>& residency_log() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace magi2
