// `magi2 quantize`: a model folder with FP8 routed experts (docs/fp8.md).
#pragma once

#include <cstddef>
#include <string>

namespace magi2 {

/// What quantize_model wrote.
struct QuantizeSummary {
  std::string transformer_dir;  ///< the source DiT checkpoint folder
  size_t tensors = 0;           ///< DiT tensors written (scales included)
  size_t quantized = 0;         ///< routed expert banks turned into FP8 (+ one scale tensor each)
  size_t bytes_in = 0;          ///< DiT tensor bytes read
  size_t bytes_out = 0;         ///< DiT tensor bytes written
  size_t files_copied = 0;      ///< other files carried over unchanged (hard link, else copy)
};

/// Writes the model folder `model` (an official root with preview/, or a DiT
/// checkpoint folder) to the new folder `out` with the routed expert banks
/// (moe_mlp.W_gate, W_up, W_down) in F8_E4M3 with 128 x 128 block scales
/// `<name>_scale_inv` (f32, w = q * scale) beside them in the same shard;
/// every other tensor keeps its name, dtype and bytes, the shards keep their
/// file names, the index json its layout (weight_map gains the scale names,
/// total_size is recomputed) and every other file (configs, text encoder,
/// VAEs) is carried over. `generate --model OUT` then loads it directly. The
/// DiT is bound against its config first (`config_path`, else as
/// config_for_model), so a mismatching checkpoint writes nothing. Atomic: built
/// in OUT.tmp.<pid> and renamed at the end; on any error the partial folder is
/// removed. Errors: OUT exists, the checkpoint does not bind, the experts are
/// already FP8, a non-finite expert weight, I/O failures (each naming the path).
QuantizeSummary quantize_model(const std::string& model, const std::string& out, const std::string& config_path);

}  // namespace magi2
