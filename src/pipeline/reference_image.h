// I2V reference image: the official preprocessing and encoding of the
// conditioning picture (spec magi2-pipeline.md §1.3; official
// inference/pipeline/inference_engine.py `_encode_image` with
// ref_image_type "original", `resizepad`, diffusers VideoProcessor.preprocess).
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "models/wan22_vae/encoder.h"

namespace magi2 {

/// Canvas size for a source image: the long side of the generation size,
/// `max_len = max(width, height)`; landscape (w0 > h0) -> (tw, th) =
/// (max_len, int(h0 * max_len / w0)), else (int(w0 * max_len / h0), max_len)
/// (true division, truncation). Spec §1.3 step 2.
struct ReferenceBox {
  int64_t width = 0;   ///< tw
  int64_t height = 0;  ///< th
};
ReferenceBox reference_box(int64_t image_w, int64_t image_h, int64_t gen_width, int64_t gen_height);

/// Why an image of image_w x image_h pixels cannot condition a generation of
/// gen_width x gen_height: its reference_box canvas has an empty side, or a
/// side that floors to 0 at multiples of `scale_factor` (the encoder's input
/// grid, preprocess_reference_pixels); as a phrase naming the sizes, or ""
/// when it can. Needs only the image's size, so it runs before any decoding.
std::string reference_size_problem(int64_t image_w, int64_t image_h, int64_t gen_width, int64_t gen_height,
                                   int64_t scale_factor = 32);

/// Official `resizepad`: LANCZOS-resize (PIL-exact) to fit inside tw x th
/// keeping the aspect (scale = min(tw/w0, th/h0), sizes max(1, round-half-even
/// (w0*scale))), pasted centred (offset ((tw-rw)//2, (th-rh)//2)) on a white
/// canvas. rgb: U8 [h0, w0, 3]; returns U8 [th, tw, 3]. Error: th or tw < 1.
Tensor resizepad(const Tensor& rgb, int64_t th, int64_t tw);

/// diffusers VideoProcessor(vae_scale_factor).preprocess(canvas, height=th,
/// width=tw): the size floored to multiples of `scale_factor` (Hc, Wc), a
/// second PIL LANCZOS resize to Wc x Hc (skipped when equal), then
/// f32(u8 / 255) * 2 - 1. canvas: U8 [H, W, 3]; returns f32 [3, Hc, Wc].
/// Error naming the sizes when Hc or Wc would be 0.
Tensor preprocess_reference_pixels(const Tensor& canvas, int64_t th, int64_t tw, int64_t scale_factor = 32);

/// The whole official path for one image file: load_image_rgb (EXIF, RGB) ->
/// reference_box -> resizepad -> preprocess_reference_pixels -> round to bf16
/// (the engine's dtype, spec §10.1) -> Wan2.2 encoder -> normalised latent.
/// gen_width/gen_height: the generation size in pixels (the official passes
/// latent size * 16). Returns [48, 1, hi, wi] f32 with hi = Hc/16, wi = Wc/16;
/// for packing, reshape to [1, 1, 48, 1, hi, wi] (ref_image_feat) and use
/// RefImageShape{hi, wi}. Errors: Error naming the file (unreadable /
/// unsupported / corrupt image, or reference_size_problem).
Tensor encode_reference_image(const std::string& path, int64_t gen_width, int64_t gen_height,
                              const Wan22Encoder& encoder);

}  // namespace magi2
