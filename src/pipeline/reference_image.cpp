// I2V reference image preprocessing and encoding (see reference_image.h).
#include "pipeline/reference_image.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "io/image.h"
#include "io/image_resize.h"

namespace magi2 {

ReferenceBox reference_box(int64_t image_w, int64_t image_h, int64_t gen_width, int64_t gen_height) {
  MAGI2_CHECK(image_w >= 1 && image_h >= 1 && gen_width >= 1 && gen_height >= 1,
              "reference image: bad sizes (image ", image_w, "x", image_h, ", generation ", gen_width, "x",
              gen_height, ")");
  const int64_t max_len = std::max(gen_width, gen_height);
  ReferenceBox b;
  // Python int(a * m / b): exact integer product, correctly rounded double
  // quotient, truncation.
  if (image_w > image_h) {
    b.width = max_len;
    b.height = static_cast<int64_t>(static_cast<double>(image_h * max_len) / static_cast<double>(image_w));
  } else {
    b.height = max_len;
    b.width = static_cast<int64_t>(static_cast<double>(image_w * max_len) / static_cast<double>(image_h));
  }
  return b;
}

std::string reference_size_problem(int64_t image_w, int64_t image_h, int64_t gen_width, int64_t gen_height,
                                   int64_t scale_factor) {
  const ReferenceBox b = reference_box(image_w, image_h, gen_width, gen_height);
  if (b.width < scale_factor || b.height < scale_factor)
    return str_cat("image ", image_w, "x", image_h, " fits a ", b.width, "x", b.height, " canvas for the ", gen_width,
                   "x", gen_height, " generation, under the encoder's ", scale_factor,
                   "-pixel grid on one side (its aspect ratio is too extreme for this size)");
  return "";
}

Tensor resizepad(const Tensor& rgb, int64_t th, int64_t tw) {
  MAGI2_CHECK(rgb.dtype() == DType::U8 && rgb.dim() == 3 && rgb.size(2) == 3 && rgb.is_contiguous(),
              "resizepad: expected a contiguous U8 [H, W, 3] image, got ", shape_str(rgb.shape()));
  MAGI2_CHECK(th >= 1 && tw >= 1, "reference image: canvas ", tw, "x", th,
              " is empty (the image's aspect ratio is too extreme for the generation size)");
  const int64_t h0 = rgb.size(0), w0 = rgb.size(1);
  const double scale = std::min(static_cast<double>(tw) / static_cast<double>(w0),
                                static_cast<double>(th) / static_cast<double>(h0));
  // Python round(): half to even, which nearbyint does in the default rounding mode.
  const int64_t rw = std::max<int64_t>(1, static_cast<int64_t>(std::nearbyint(static_cast<double>(w0) * scale)));
  const int64_t rh = std::max<int64_t>(1, static_cast<int64_t>(std::nearbyint(static_cast<double>(h0) * scale)));
  const Tensor resized = resize_lanczos_pil(rgb, rw, rh);
  Tensor canvas = Tensor::empty({th, tw, 3}, DType::U8);
  std::memset(canvas.data(), 255, canvas.nbytes());
  // PIL paste clips the pasted image to the canvas.
  const int64_t ox = (tw - rw) / 2, oy = (th - rh) / 2;  // non-negative: rw <= tw, rh <= th
  const uint8_t* s = resized.data_as<uint8_t>();
  uint8_t* d = canvas.data_as<uint8_t>();
  for (int64_t y = 0; y < rh; ++y) {
    const int64_t cy = y + oy;
    if (cy < 0 || cy >= th) continue;
    const int64_t x0 = std::max<int64_t>(0, -ox), x1 = std::min<int64_t>(rw, tw - ox);
    if (x1 > x0) std::memcpy(d + (cy * tw + ox + x0) * 3, s + (y * rw + x0) * 3, (x1 - x0) * 3);
  }
  return canvas;
}

Tensor preprocess_reference_pixels(const Tensor& canvas, int64_t th, int64_t tw, int64_t scale_factor) {
  const int64_t hc = th - th % scale_factor, wc = tw - tw % scale_factor;
  MAGI2_CHECK(hc >= 1 && wc >= 1, "reference image: canvas ", tw, "x", th, " floors to ", wc, "x", hc,
              " at multiples of ", scale_factor, " (too small for the encoder)");
  const Tensor img = resize_lanczos_pil(canvas, wc, hc);
  Tensor out = Tensor::empty({3, hc, wc}, DType::F32);
  const uint8_t* s = img.data_as<uint8_t>();
  float* d = out.data_as<float>();
  for (int64_t p = 0; p < hc * wc; ++p)
    for (int64_t c = 0; c < 3; ++c) {
      const float v = static_cast<float>(s[p * 3 + c]) / 255.0f;  // numpy float32 / 255
      d[c * hc * wc + p] = 2.0f * v - 1.0f;                         // torch 2x - 1 in fp32
    }
  return out;
}

Tensor encode_reference_image(const std::string& path, int64_t gen_width, int64_t gen_height,
                              const Wan22Encoder& encoder) {
  const Tensor rgb = load_image_rgb(path);
  const std::string why = reference_size_problem(rgb.size(1), rgb.size(0), gen_width, gen_height);
  MAGI2_CHECK(why.empty(), path, ": ", why);
  const ReferenceBox box = reference_box(rgb.size(1), rgb.size(0), gen_width, gen_height);
  const Tensor canvas = resizepad(rgb, box.height, box.width);
  Tensor pixels = preprocess_reference_pixels(canvas, box.height, box.width);
  // The engine casts the preprocessed image to its dtype (bf16) before the
  // fp32 encoder sees it.
  float* p = pixels.data_as<float>();
  for (int64_t i = 0; i < pixels.numel(); ++i) p[i] = round_bf16(p[i]);
  const int64_t s = encoder.spatial_stride();
  MAGI2_CHECK(pixels.size(1) % s == 0 && pixels.size(2) % s == 0, path, ": preprocessed size ", pixels.size(2),
              "x", pixels.size(1), " is not a multiple of the encoder stride ", s);
  return encoder.encode(pixels);
}

}  // namespace magi2
