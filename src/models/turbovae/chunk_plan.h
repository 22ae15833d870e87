// The TurboVAE temporal sliding window (spec magi2-pipeline.md §6.1 "Temporal
// sliding window"; official TurboVAED._sliding_window_decode): which latent
// frames each decoder call sees and which of its output frames are kept.
#pragma once

#include <cstdint>
#include <vector>

namespace magi2 {

/// One decoder call.
struct TurboChunk {
  int64_t begin = 0, end = 0;   ///< latent frames [begin, end) of the padded latent
  bool first = false;           ///< is_first_chunk (the temporal upsamplers drop their frame 0)
  int64_t drop_front = 0;       ///< output frames discarded at the start of this call's output
  int64_t drop_back = 0;        ///< ... and at its end
};

/// The whole window: the latent is padded to `padded_frames` by repeating its
/// last frame `pad` times; the concatenated kept frames lose their last
/// pad * temporal_compression_ratio frames.
struct TurboChunkPlan {
  int64_t frames = 0;
  int64_t pad = 0;
  int64_t padded_frames = 0;
  std::vector<TurboChunk> chunks;
};

/// Plan for `frames` latent frames (>= 1) with the config's first_chunk_size
/// F, step_size S and `overlap` = 1 * temporal_compression_ratio output frames:
/// pad to F (T < F) or to F + k*S; chunk 0 = [0, F+1) dropping `overlap` at
/// its end (or [0, F) alone when the padded latent is F frames); then for
/// i = F, F+S, ...: [i-1, i+S+1) dropping `overlap` at both ends, the last one
/// [i-1, i+S) dropping only at the front. Error if frames < 1.
TurboChunkPlan plan_turbo_chunks(int64_t frames, int64_t first_chunk_size, int64_t step_size, int64_t overlap);

}  // namespace magi2
