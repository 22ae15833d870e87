// The refiner's token layout (official refiner_data_proxy.py
// Magi2RefinerDataProxy.process_input / process_output; docs/refiner.md §3-5):
// video tokens in block order, then audio and text tokens; the 9-column RoPE
// coordinates; the block-window attention as (q range, k range) pairs.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "models/magi2_refiner/config.h"

namespace magi2 {

/// One refiner forward's sizes: the refiner latent grid and the token counts.
struct RefinerLayout {
  int64_t frames = 0, height = 0, width = 0;  ///< refiner latent T, H, W (patch 1: one token each)
  int64_t audio_len = 0;                      ///< audio tokens (0 in the release: audio noise scale < 0)
  int64_t text_len = 0;                       ///< text tokens of this branch
  int64_t video_tokens() const { return frames * height * width; }
  int64_t tokens() const { return video_tokens() + audio_len + text_len; }
};

/// Everything static about a forward of one layout, built on the host once.
struct RefinerPlan {
  RefinerLayout layout;
  int64_t c_pad = 0;                 ///< packed width: max(video, audio, text in-channels)
  /// Packed row i holds original token token_order[i] (original order: video
  /// t-major, then audio, then text).
  std::vector<int32_t> token_order;
  Tensor modality;                   ///< [N] i32 host, packed order: 0 video, 1 audio, 2 text
  Tensor coords;                     ///< [N, 9] f32 host, packed order
  Tensor q_ranges, k_ranges;         ///< [P, 2] i32 host, packed token indices (official pair order)
};

/// Builds the plan. Errors: an empty grid.
RefinerPlan make_refiner_plan(const RefinerLayout& layout, const RefinerArch& arch, const RefinerWindow& window);

/// Packs the inputs in plan order: latent [1, C_v, T, H, W] or [C_v, T, H, W]
/// f32, audio [La, C_a] (or [1, La, C_a]; may be undefined when La = 0), text
/// [Lt, C_t] (or [1, Lt, C_t]) F32/BF16 -> x [N, c_pad] f32, zero-padded.
/// Errors name the input whose shape disagrees with the plan.
Tensor pack_refiner_tokens(const RefinerPlan& plan, const Tensor& latent, const Tensor& audio, const Tensor& text,
                           int64_t video_channels, int64_t audio_channels);

/// One forward's inputs split by modality: each modality's rows in packed
/// order (the order Refiner keeps inside a modality), each exactly as wide as
/// the pre-adapter reads (the arch's in-channels). The rows of x =
/// pack_refiner_tokens(...) restricted to one modality and to its first
/// in-channels columns, without the [N, c_pad] f32 tensor: at 1080p that is
/// 514k x 5120 f32 = 10.5 GB, most of it padding of the 48-channel video rows,
/// while these are ~100 MB.
struct RefinerInputs {
  Tensor video;  ///< [video tokens, C_v] f32
  Tensor audio;  ///< [audio tokens, C_a] f32
  Tensor text;   ///< [text tokens, C_t] f32
};

/// Splits the inputs of one forward (the arguments of pack_refiner_tokens, and
/// the text in-channels C_t) into RefinerInputs for `plan`. A text narrower
/// than C_t is zero-padded, as pack_refiner_tokens pads it to c_pad. Errors:
/// those of pack_refiner_tokens, and a plan whose modality disagrees with its
/// token order.
RefinerInputs split_refiner_inputs(const RefinerPlan& plan, const Tensor& latent, const Tensor& audio,
                                   const Tensor& text, int64_t video_channels, int64_t audio_channels,
                                   int64_t text_channels);

/// The video rows of a forward's output out [N, >= C_v] (packed order) as a
/// latent [1, C_v, T, H, W] f32.
Tensor unpack_refiner_video(const RefinerPlan& plan, const Tensor& out, int64_t video_channels);

}  // namespace magi2
