// TurboVAE sliding-window plan (see chunk_plan.h).
#include "models/turbovae/chunk_plan.h"

#include "core/error.h"

namespace magi2 {

TurboChunkPlan plan_turbo_chunks(int64_t frames, int64_t first, int64_t step, int64_t overlap) {
  MAGI2_CHECK(frames >= 1, "TurboVAE: the latent has no frames");
  MAGI2_CHECK(first >= 1 && step >= 1 && overlap >= 0, "TurboVAE: bad chunk sizes");
  TurboChunkPlan p;
  p.frames = frames;
  if (frames < first)
    p.pad = first - frames;
  else if ((frames - first) % step != 0)
    p.pad = step - (frames - first) % step;
  p.padded_frames = frames + p.pad;
  const int64_t n = p.padded_frames;
  if (n == first) {
    p.chunks.push_back({0, first, true, 0, 0});
    return p;
  }
  p.chunks.push_back({0, first + 1, true, 0, overlap});
  for (int64_t i = first; i < n; i += step) {
    const bool last = i + step == n;
    p.chunks.push_back({i - 1, last ? i + step : i + step + 1, false, overlap, last ? 0 : overlap});
  }
  return p;
}

}  // namespace magi2
