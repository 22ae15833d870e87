// The memory plan of a request: per stage (text encoder, DiT, 1080p refiner,
// TurboVAE decode, Oobleck decode, Wan2.2 image encode) the bytes of weights,
// activations and workspace, where each lives, which stages are resident in
// each phase, and the peak per memory pool, computed before anything loads
// from the model folder's configs and checkpoint headers (safetensors
// headers, torch zip pickles; no weight bytes are read). `magi2 generate
// --dry-run` prints it; the engine refuses a request whose plan does not fit
// the device budget (EngineOptions::max_device_memory) before loading.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "engine/fp8_modes.h"
#include "engine/params.h"
#include "models/magi2_dit/config.h"

namespace magi2 {

/// Where a stage's bytes live.
enum class MemoryPool {
  Device,  ///< the DiT's compute device (a GPU); only when the DiT runs on CUDA
  Host,    ///< host RAM (CPU backend buffers, converted weights)
};

/// One stage of a run.
struct StageMemory {
  std::string name;         ///< "text_encoder", "dit", "refiner", "turbovae_decode", "oobleck_decode", "wan22_encode"
  std::string backend;      ///< backend it runs on: "cpu" or "cuda"
  MemoryPool pool = MemoryPool::Host;
  uint64_t weights = 0;      ///< bytes of the weights as the stage holds them (compute dtype), in `pool`
  /// `--offload layerwise` (dit, text_encoder on CUDA): the streamed layer weights in pinned
  /// host memory, counted in the host pool wherever `weights` is counted
  /// (`weights` is then the resident tensors + two layer slots on the device).
  uint64_t pinned_host = 0;
  bool weights_mapped = false;  ///< host weights are zero-copy views of the mmap'd checkpoint (page cache)
  uint64_t activations = 0;  ///< bytes of the activation buffers of one forward/decode
  uint64_t workspace = 0;    ///< backend scratch (GEMM/attention/MoE plans, allocator rounding)
  /// How each number was obtained: "weights: ..., activations: ..." (a
  /// "formula" is an estimate from the code's buffer shapes, not a count).
  std::string source;
  uint64_t total() const { return weights + activations + workspace; }
};

/// Whether the text encoder and the DiT are held at once (the other stages:
/// MemoryPlan::refiner_swaps_dit, MemoryPlan::codecs_alone).
enum class Residency {
  Together,    ///< every loaded stage stays resident (fits the budget together)
  Sequential,  ///< the text encoder is freed before the DiT loads and back (same pool, both do not fit)
};

/// The plan of one request.
struct MemoryPlan {
  std::string label;            ///< the request ("--prompt", "sample 3")
  std::string dit_backend;      ///< "cpu" or "cuda"
  int64_t width = 0, height = 0;  ///< pixels
  double seconds = 0;
  int steps = 0;
  int64_t tokens = 0;           ///< packed DiT tokens per forward (both CFG branches)
  int64_t refiner_tokens = 0;   ///< tokens of the larger refiner forward (1080p; 0 otherwise)
  int64_t prompt_tokens = 0, negative_tokens = 0;
  uint64_t budget = 0;          ///< bytes allowed in the DiT's pool (0 = unknown: no fit check)
  std::string budget_source;    ///< "--max-device-memory", "free GPU memory", "host RAM"
  std::vector<StageMemory> stages;
  /// The text encoder and the DiT (Engine: the text encoder is freed before the DiT loads and back).
  Residency residency = Residency::Together;
  /// The DiT and the refiner are never resident together (both do not fit the
  /// budget): the DiT is freed before the refiner uploads, and the refiner
  /// before the DiT loads again (the next sample's denoise).
  bool refiner_swaps_dit = false;
  /// The codecs (TurboVAE, Oobleck, Wan2.2 encoder) are not resident beside the
  /// DiT or the refiner: each uploads for its phase once those are freed, and
  /// is freed before the DiT loads again (their checkpoints are still checked
  /// in Engine::prepare).
  bool codecs_alone = false;
  /// Phases of a run in order. `resident` lists the stages a phase may hold:
  /// the one it runs in full, the others as "NAME (weights)" (kept from an
  /// earlier phase or sample); the engine frees every other loaded stage on
  /// entering the phase. Bytes per pool count everything listed.
  struct Phase {
    std::string name;  ///< "encode", "image", "denoise", "refine", "decode"
    std::vector<std::string> resident;
    uint64_t device = 0, host = 0;
    /// Whether `stage` (a StageMemory::name) may be resident in this phase.
    bool holds(const std::string& stage) const;
  };
  std::vector<Phase> phases;
  uint64_t peak_device = 0, peak_host = 0;
  std::string peak_device_phase, peak_host_phase;
  bool fits = true;
  /// When it does not fit: one line saying what is needed and what would fit.
  std::string advice;
  /// The FP8 modes planned (the routed experts as the checkpoint and --weights give them).
  Fp8Modes fp8;
  /// What the DiT's backend cannot run although the plan fits, one line each
  /// (fp8_backend_problems; empty: nothing): `--dry-run` prints them, a run stops on the first.
  std::vector<std::string> problems;

  const StageMemory* stage(const std::string& name) const;
  /// The phase named `name`, or null when the request has none.
  const Phase* phase(const std::string& name) const;
  /// Bytes of the DiT's pool at its peak (device for CUDA, host for CPU).
  uint64_t peak_in_budget_pool() const { return dit_backend == "cuda" ? peak_device : peak_host; }
  /// One line saying which stages are parted (residency, refiner_swaps_dit, codecs_alone).
  std::string residency_summary() const;
  /// Human-readable table (several lines, ends with a newline).
  std::string text() const;
  /// Machine-readable form (byte counts as integers).
  nlohmann::json json() const;
};

/// Parses a byte size: an integer number of bytes or a number with a unit
/// (KiB/MiB/GiB/TiB = powers of 1024; KB/MB/GB/TB = powers of 1000; "40GiB",
/// "0.5TiB"). Error naming `flag` for anything else, or a size over 2^60.
uint64_t parse_byte_size(const std::string& text, const std::string& flag);

/// "12.3 GiB" style rendering.
std::string format_bytes(uint64_t bytes);

/// The default budget of a backend ("cpu" | "cuda"): free memory of GPU 0
/// (CUDA backend) or the host's physical RAM; `source` says which. 0 when
/// unknown (a CUDA plan in a build or on a machine without a GPU).
uint64_t default_memory_budget(const std::string& backend, std::string* source);

/// Plans requests of one model folder. Holds the folder's configs and, once a
/// prompt is planned, its tokenizer (token counts size the DiT's packed sequence).
class MemoryPlanner {
 public:
  /// Resolves the model folder (builtin:tiny is made on first use) and reads
  /// the DiT's config and checkpoint headers; the other components' configs
  /// and headers are read when a plan first needs them. `backend`
  /// is the DiT's resolved backend ("cpu" | "cuda"). Errors: those of the
  /// folder, configs and headers (one line naming the file).
  MemoryPlanner(const EngineOptions& options, const std::string& backend);
  ~MemoryPlanner();
  MemoryPlanner(const MemoryPlanner&) = delete;
  MemoryPlanner& operator=(const MemoryPlanner&) = delete;

  /// The plan of `p` (validated) against `budget` bytes (0: no fit check).
  /// `text_encoder_kept`: the front end keeps the text encoder loaded during
  /// the loop (more prompts to encode, a server), unless residency is
  /// Sequential. When every stage resident together does not fit the budget,
  /// the stages sharing the budget's pool are parted step by step, cheapest
  /// first, until the plan fits: the text encoder from the DiT (Sequential),
  /// then the refiner from the DiT (refiner_swaps_dit), then the codecs from
  /// both (codecs_alone). When even the last does not fit, `fits` is false
  /// and `advice` names the phase at the peak and what would fit.
  /// Errors: a prompt over the token limit without truncate (as the encoder's);
  /// a 1080p request whose refiner folder or config is missing or bad.
  MemoryPlan plan(const GenerateParams& p, uint64_t budget, const std::string& budget_source,
                  bool text_encoder_kept = true);

  /// Weight bytes of the text encoder and of the DiT (the DiT's in its pool:
  /// with EngineOptions::offload "layerwise" on CUDA, the resident tensors +
  /// two layer slots).
  uint64_t text_encoder_weights();
  uint64_t dit_weights() const;
  /// Weight bytes of the refiner (bf16 matrices, f32 norms and adapters as
  /// RefinerWeights binds them); reads its config and checkpoint headers on
  /// first use. Errors: a missing refiner folder, a bad config or header.
  uint64_t refiner_weights();
  /// The DiT's device weight bytes with `--offload layerwise` (the same as
  /// dit_weights() when it is on or the DiT runs on the CPU): what the "would
  /// fit" advice checks.
  uint64_t dit_weights_layerwise() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace magi2
