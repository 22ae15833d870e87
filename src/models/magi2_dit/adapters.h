// The per-modality input and output adapters around the transformer blocks,
// shared by the preview DiT (dit.cpp) and the 1080p refiner
// (models/magi2_refiner/refiner.cpp): both permute tokens into modality order
// (video, audio, text rows; Groups) and run one fp32 linear per modality.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "ops/ops.h"

namespace magi2 {

/// Pre-adapter (spec §3.8): for each modality m of `groups3` (0 video, 1 audio,
/// 2 text) with rows, y[rows] = x_p[rows, :chans[m]] * w[m]^T + b[m], fp32.
/// x_p [N, C_pad] f32 (permuted), y [N, D] f32, w[m] [D, chans[m]] f32,
/// b[m] [D] f32; modalities without rows are skipped. Errors: the backend's
/// shape checks (the caller checks C_pad >= chans[m] with its own message).
struct PreAdapterParams {
  Tensor x_p;
  Tensor y;
  Groups groups3;
  const Tensor* w[3] = {nullptr, nullptr, nullptr};
  const Tensor* b[3] = {nullptr, nullptr, nullptr};
  int64_t chans[3] = {0, 0, 0};
};
void pre_adapter(Backend& be, const PreAdapterParams& p);

/// Post-adapter (spec §3.11): out_p is zeroed, then for the video and the
/// audio rows of `groups3`, fin[rows] = RMSNorm(state[rows]; norm[m]) and
/// out_p[rows, :chans[m]] = fin[rows] * linear[m]^T (fp32); text rows stay 0.
/// Finally out = out_p gathered back to the original token order by `inv`.
/// state [N, 4D] f32, fin [N, 4D] f32, out_p / out [N, C_out] f32, inv [N] i32.
struct PostAdapterParams {
  Tensor state;
  Tensor fin;
  Tensor out_p;
  Tensor out;
  Tensor inv;
  Groups groups3;
  const Tensor* norm[2] = {nullptr, nullptr};
  const Tensor* linear[2] = {nullptr, nullptr};
  int64_t chans[2] = {0, 0};
};
void post_adapter(Backend& be, const PostAdapterParams& p);

}  // namespace magi2
