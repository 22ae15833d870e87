// The FP8 modes of a run (docs/fp8.md): the routed experts' format
// (--weights), how FP8 experts compute (--fp8-compute), the DiT's attention
// (--attention-compute) and dense linears (--linear-compute). How the console
// summary and the metrics JSON report them, and which of them the DiT's
// backend cannot run, known from the config alone (the memory plan lists
// those before anything loads).
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "engine/params.h"
#include "models/magi2_dit/config.h"

namespace magi2 {

/// The FP8 choices a run uses.
struct Fp8Modes {
  /// Routed experts in e4m3 (--weights fp8-experts, or auto on an FP8 checkpoint).
  bool fp8_experts = false;
  std::string fp8_compute = "w8a16";       ///< --fp8-compute: w8a16 | w8a8 (moot for bf16 experts)
  std::string attention_compute = "bf16";  ///< --attention-compute: bf16 | fp8
  std::string linear_compute = "bf16";     ///< --linear-compute: bf16 | fp8

  /// "experts bf16, attention bf16, linears bf16" ("experts fp8 w8a16, ..."
  /// for FP8 experts): a clause of a run's summary line.
  std::string text() const;
  /// {"weights": "bf16" | "fp8-experts", "fp8_compute": "w8a16" | "w8a8" |
  /// "none" (bf16 experts), "attention_compute", "linear_compute"}: the keys of
  /// the generate metrics and of `magi2 bench`'s rows.
  nlohmann::json json() const;
};

/// The modes of `options` (validated) with the routed experts as loaded or planned (`fp8_experts`).
Fp8Modes fp8_modes(const EngineOptions& options, bool fp8_experts);

/// What the DiT of `arch` cannot run on `backend` ("cpu" | "cuda") in
/// `modes`, one line each, naming the flag and a way out (empty: nothing).
/// On CUDA, --linear-compute fp8 needs every dense linear's in and out width
/// (per modality set) a multiple of 128 (the built-in tiny model's are not) and
/// --attention-compute fp8 head dim 128; the CPU backend runs any width. Pure.
std::vector<std::string> fp8_backend_problems(const DitArch& arch, const Fp8Modes& modes, const std::string& backend);

}  // namespace magi2
