// Token packing of the MAGI-2 DiT inputs and unpacking of its output, for both
// classifier-free-guidance branches of one request in one varlen batch
// (branch 0 = conditional / positive prompt, branch 1 = unconditional / negative).
//
// Spec: magi2-pipeline.md §3, §4.1-4.7; magi2-dit.md §3.1-3.7, §3.11. Official:
// inference/pipeline/sampler.py (prepare_model_input), inference/pipeline/
// preview_data_proxy.py (SingleData, SimplePackedData, Magi2DataProxy),
// inference/model/magi2_preview.py (get_coords, sinusoidal_embedding_1d).
//
// Shapes are static for a request, so everything that depends only on shapes
// (token order, coords, modality, cu_seqlens) is built once in a PackingPlan.
// Per denoising step only the video/audio rows of x and the time embedding
// change: pack_static_tokens() once, then pack_latent_tokens() and
// fill_time_embedding() every step into the same buffers.
//
// Only patch size (1,1,1) is supported (the only released one): one token per
// latent voxel / audio frame. No time token (add_time_token = false) and no
// CP/EP padding segment (the upstream multi-rank padding, spec pipeline §10.1.5).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "pipeline/time_embedding.h"

namespace magi2 {

/// Modality codes of the DiT's `modality_mapping` (magi2-dit.md §3.2; official
/// `Modality`). TIME is never emitted by this packer.
enum class TokenModality : int32_t { Video = 0, Audio = 1, Text = 2, Time = 3 };

/// Latent sizes of one generation: video latent [channels, frames, height, width]
/// and audio latent [audio_frames, audio_channels].
struct LatentShape {
  int64_t channels = 48;
  int64_t frames = 0;
  int64_t height = 0;
  int64_t width = 0;
  int64_t audio_frames = 0;
  int64_t audio_channels = 64;
};

/// Latent shape of the fixed 10 s release clip at W x H pixels (spec pipeline
/// §1.2, §3.1, §3.2; magi2-dit.md §1.4):
///  * spatial: VAE stride 16 -> height = height_px / 16, width = width_px / 16;
///  * frames: the DiT sizes the clip on a 25 fps timeline, 2 * round(10 s * 12.5 fps)
///    = 250 frames, VAE temporal stride 8 -> (250 - 1) / 8 + 1 = 32 latent frames;
///  * audio: 25 latent frames/s -> 250 audio tokens of 64 channels; 48 video channels.
/// 448x256 (272p) -> [48, 32, 16, 28]; 896x512 (540p) -> [48, 32, 32, 56].
/// Errors: Error when a size is not positive or not a multiple of 16.
LatentShape latent_shape_for_pixels(int64_t width_px, int64_t height_px);

/// Latent shape of a release resolution preset: "272p" (448x256) or "540p"
/// (896x512), see latent_shape_for_pixels(). Errors: Error naming an unknown preset.
LatentShape latent_shape_for_resolution(std::string_view resolution);

/// Latent grid of one reference (conditioning) image: the `ref_image_feat_len`
/// pair (h, w); the image contributes h*w tokens.
struct RefImageShape {
  int64_t h = 0;
  int64_t w = 0;
};

/// Shapes of one request (identical for every denoising step).
struct PackingShapes {
  LatentShape latent;                   ///< video + audio latent sizes (both branches)
  int64_t text_channels = 5120;         ///< text-encoder width (release 5120)
  int64_t text_len_cond = 0;            ///< positive-prompt tokens (branch 0)
  int64_t text_len_uncond = 0;          ///< negative-prompt tokens (branch 1)
  std::vector<RefImageShape> ref_images;  ///< I2V reference images, empty for T2V
};

/// Row ranges of one CFG branch inside the packed sequence (absolute row indices).
/// Order (spec pipeline §4.2; official SingleData.feat_to_cat):
/// [video | audio | text | for each image k: special token, image tokens].
struct BranchLayout {
  int64_t begin = 0;         ///< first row of the branch
  int64_t length = 0;        ///< rows of the branch
  int64_t video_begin = 0;   ///< frames*height*width rows, (t, y, x) row-major
  int64_t audio_begin = 0;   ///< audio_frames rows
  int64_t text_begin = 0;    ///< text_len rows
  int64_t text_len = 0;
  std::vector<int64_t> special_row;   ///< per image: its special-token row
  std::vector<int64_t> image_begin;   ///< per image: first of its h*w rows
};

/// Everything about the packed sequence that depends only on shapes; build once
/// per request with make_packing_plan().
struct PackingPlan {
  PackingShapes shapes;
  int64_t width = 0;         ///< C_pad = max(video, audio, text channels): columns of x
  int64_t total_tokens = 0;  ///< N = length of branch 0 + branch 1
  int64_t max_seqlen = 0;    ///< max branch length (max_seqlen_q = max_seqlen_k)
  std::array<BranchLayout, 2> branches;
  /// [N, 9] f32 rows (t, h, w, T, H, W, refT, refH, refW) (spec pipeline §4.4,
  /// official get_coords).
  Tensor coords;
  /// [N] i32 TokenModality per row; special tokens TEXT, image tokens VIDEO.
  Tensor modality;
  /// [3] i32 {0, N_cond, N_cond + N_uncond} (cu_seqlens_q = cu_seqlens_k).
  Tensor cu_seqlens;
  /// [N] u8: 1 for video/audio rows (time t/1000), 0 for text/special/image rows
  /// (time 0); drives fill_time_embedding().
  Tensor is_noisy;
};

/// Builds the static layout of a request. Errors (Error naming the field): any of
/// latent channels/frames/height/width/audio_frames/audio_channels/text_channels
/// < 1, a text length < 0, a reference image with h or w < 1, or a total token
/// count that does not fit the int32 cu_seqlens.
PackingPlan make_packing_plan(const PackingShapes& shapes);

/// The request's static conditioning tensors (one copy; both branches use them).
/// Every tensor may carry a leading batch dimension of 1 or omit it.
struct PackingConditioning {
  Tensor text_cond;    ///< [1, Lc, D] or [Lc, D], F32 or BF16 (bf16 values widen exactly)
  Tensor text_uncond;  ///< [1, Lu, D] or [Lu, D], F32 or BF16
  /// I2V only: [1, M, Cv, 1, Hp, Wp] or [M, Cv, 1, Hp, Wp], F32 or BF16, with
  /// Hp*Wp >= h*w of every image; image k contributes the first h_k*w_k tokens of
  /// its row-major Hp x Wp grid (official truncation; exact when Hp,Wp = h,w).
  Tensor ref_image_feat;
  /// I2V only: [1, M, D] or [M, D], F32 or BF16. Cast to the text dtype first
  /// (official `.to(text dtype)`): with BF16 text, F32 special tokens are rounded
  /// to bf16 (RNE).
  Tensor ref_special_tokens;
};

/// Allocates x [N, width] f32 and writes the static rows of both branches: text
/// (cond text in branch 0, uncond text in branch 1), special tokens and image
/// tokens (identical in both branches: use_ref_for_uncond = true, spec pipeline
/// §4.1), each zero-padded on the right. Video/audio rows are left zero.
/// Errors: Error naming the tensor whose shape/dtype disagrees with the plan,
/// or conditioning given for reference images the plan does not have.
Tensor pack_static_tokens(const PackingPlan& plan, const PackingConditioning& cond);

/// Per-step: overwrites the video and audio rows of both branches of `x` (from
/// pack_static_tokens) with the current latents; columns beyond the latent widths
/// are not touched (they stay zero). Token n = (t*H + y)*W + x holds
/// latent[c, t, y, x] for c < Cv; audio token k holds audio[k, :].
/// latent: [1, Cv, T, H, W] or [Cv, T, H, W] F32 contiguous; audio_latent:
/// [1, La, Ca] or [La, Ca] F32 contiguous. Errors: Error naming the tensor on a
/// shape/dtype mismatch, or when x is not [N, width] F32 contiguous.
void pack_latent_tokens(const PackingPlan& plan, const Tensor& latent, const Tensor& audio_latent,
                        Tensor& x);

/// pack_static_tokens() followed by pack_latent_tokens(): the DiT argument x
/// [N, width] f32 (official Transformer.forward `x`).
Tensor pack_tokens(const PackingPlan& plan, const Tensor& latent, const Tensor& audio_latent,
                   const PackingConditioning& cond);

/// Per-step: writes the time embedding [N, 64] f32 into `out` for scheduler
/// timestep `timestep` (fp32 value of the integer timestep, e.g. 823). Video and
/// audio rows get sinusoidal_embedding(normalize_timestep(timestep)); text,
/// special and image rows get the tau = 0 embedding [1 x32, 0 x32] (spec pipeline
/// §4.5; official SingleData.time_token_sequence). Errors: Error when `out` is not
/// [N, 64] F32 contiguous.
void fill_time_embedding(const PackingPlan& plan, float timestep, Tensor& out);

/// Allocating form of fill_time_embedding(): returns [N, 64] f32.
Tensor pack_time_embedding(const PackingPlan& plan, float timestep);

/// The five DiT forward arguments (magi2-dit.md §3.1) plus max_seqlen.
struct PackedDitInputs {
  Tensor x;           ///< [N, width] f32
  Tensor coords;      ///< [N, 9] f32 (shares the plan's storage)
  Tensor modality;    ///< [N] i32 (shares the plan's storage)
  Tensor cu_seqlens;  ///< [3] i32 (shares the plan's storage)
  Tensor time_emb;    ///< [N, 64] f32
  int64_t max_seqlen = 0;
};

/// One-shot packing of a step (tests, single forwards): pack_tokens() +
/// pack_time_embedding() + the plan's static tensors. Errors: as those functions.
PackedDitInputs pack_dit_inputs(const PackingPlan& plan, const Tensor& latent,
                                const Tensor& audio_latent, const PackingConditioning& cond,
                                float timestep);

/// DiT prediction split back per branch: index 0 = cond, 1 = uncond.
struct UnpackedPrediction {
  Tensor video;  ///< [2, Cv, T, H, W] f32
  Tensor audio;  ///< [2, La, Ca] f32
};

/// Unpacks the DiT output (official SimplePackedData.depack_token_sequence, spec
/// pipeline §4.6, magi2-dit.md §3.11): per branch, video rows, columns [0, Cv) ->
/// [Cv, T, H, W]; audio rows, columns [0, Ca) -> [La, Ca]. Text, special and
/// image rows are discarded. `out`: [N, C_out] F32 with C_out >= max(Cv, Ca)
/// (64 in the release); rows may be strided (slice_cols views are fine).
/// Errors: Error naming `out` on a shape/dtype mismatch.
UnpackedPrediction unpack_output(const PackingPlan& plan, const Tensor& out);

/// The latent <-> token-row copies as flat index maps, for the device-resident
/// loop (Backend::copy_elems): the same element placement as
/// pack_latent_tokens() and unpack_output(), built once per request shape.
struct LatentTokenMaps {
  std::vector<int32_t> video_src, video_dst;  ///< x.flat[video_dst[i]] = latent.flat[video_src[i]]
  std::vector<int32_t> audio_src, audio_dst;  ///< x.flat[audio_dst[i]] = audio_latent.flat[audio_src[i]]
  std::vector<int32_t> out_video;  ///< pred_video.flat[i] = out.flat[out_video[i]], pred [2, Cv, T, H, W]
  std::vector<int32_t> out_audio;  ///< pred_audio.flat[i] = out.flat[out_audio[i]], pred [2, La, Ca]
  std::vector<int32_t> noisy_rows; ///< rows whose time channels follow the step (plan.is_noisy)
};

/// Builds the maps for x of width plan.width and a DiT output of `out_cols`
/// columns (contiguous). Errors: Error when an index would not fit in int32.
LatentTokenMaps latent_token_maps(const PackingPlan& plan, int64_t out_cols);

}  // namespace magi2
