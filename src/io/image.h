// Still-image decoding for the I2V reference image (spec pipeline §1.3 step 1):
// PNG (libpng) and JPEG (libjpeg-turbo) to RGB uint8, with the EXIF orientation
// applied and every pixel format mapped to RGB the way the official loader
// (diffusers load_image = PIL open, ImageOps.exif_transpose, convert("RGB")) does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace magi2 {

/// Largest image accepted, in pixels: PIL's DecompressionBombError threshold
/// (2 x Image.MAX_IMAGE_PIXELS = 2 x 89478485), checked from the header
/// before anything is decoded or allocated.
constexpr int64_t kMaxImagePixels = 178956970;
/// Longest side accepted (JPEG's own limit; PNG allows 2^31 - 1).
constexpr int64_t kMaxImageSide = 65500;
/// Most elongated image accepted (long side / short side): far beyond any
/// video reference picture, and it keeps the resize to the latent grid from
/// collapsing a side to zero pixels.
constexpr int64_t kMaxImageAspect = 64;
/// Largest image file read (bytes).
constexpr size_t kMaxImageFileBytes = size_t{256} << 20;
/// Progressive JPEG scans accepted: each scan re-walks the whole coefficient
/// buffer, so a small file of thousands of scans is a CPU bomb (libjpeg-turbo's
/// own tools suggest the same kind of cap).
constexpr int kMaxJpegScans = 256;

/// Why an image of w x h pixels is refused (empty, a side over kMaxImageSide,
/// more than kMaxImagePixels pixels, aspect over kMaxImageAspect), as a
/// phrase, or nullptr when it is accepted.
const char* image_size_problem(int64_t width, int64_t height);

/// Decodes a PNG or JPEG file (detected by its signature, not its name) to an
/// RGB image: U8 tensor [H, W, 3], rows top to bottom, after the EXIF
/// orientation (JPEG APP1 "Exif", PNG eXIf chunk) has been applied as PIL's
/// exif_transpose does. Pixel formats follow PIL's convert("RGB"):
/// * grayscale (1/2/4/8 bit) -> replicated; 16-bit grayscale -> min(v, 255)
///   replicated (PIL's I;16 -> RGB clips, it does not scale);
/// * 16-bit RGB / RGBA / gray+alpha -> the high byte of each sample;
/// * palette -> palette colours (tRNS transparency ignored);
/// * alpha channels dropped (no compositing); no gamma/ICC handling;
/// * JPEG: libjpeg defaults (accurate integer IDCT, fancy upsampling); CMYK /
///   YCCK JPEGs are read with Adobe's inverted convention and converted with
///   PIL's CMYK -> RGB formula.
/// Errors: one Error naming `path` for a missing/unreadable file, an unknown
/// format, a corrupt/truncated stream (the decoder's message appended), a
/// size refused by image_size_problem (from the header, before decoding), a
/// PNG whose header claims more pixel data than its bytes can inflate to
/// (zlib's 1032:1 bound), or a JPEG with more than kMaxJpegScans scans.
Tensor load_image_rgb(const std::string& path);

/// Width x height of an image as load_image_rgb would return it.
struct ImageSize {
  int64_t width = 0;
  int64_t height = 0;
};

/// The size of a PNG or JPEG file from its header, without decoding a pixel:
/// as load_image_rgb returns it, i.e. with sides swapped for an EXIF
/// orientation of 5..8 when the EXIF comes before the image data (a PNG eXIf
/// chunk after it is not seen here; load_image_rgb still applies it). For
/// refusing an impossible request before any work. Errors as load_image_rgb
/// for an unreadable file, an unknown format, a corrupt header or a refused
/// size (image_size_problem, the PNG 1032:1 bound).
ImageSize probe_image_size(const std::string& path);

/// Decodes an in-memory PNG or JPEG (as load_image_rgb; `what` names it in errors).
Tensor decode_image_rgb(const uint8_t* data, size_t size, const std::string& what);

/// The EXIF Orientation (tag 0x0112 of IFD0) of a TIFF-structured EXIF block
/// (starting at the "II*\0" / "MM\0*" header, i.e. after JPEG's "Exif\0\0"),
/// 1 when absent or unreadable (PIL treats a broken EXIF as no orientation).
int exif_orientation(const uint8_t* tiff, size_t size);

/// Applies an EXIF orientation (1..8) to an RGB U8 [H, W, 3] image, as PIL's
/// exif_transpose: 2 mirror left-right, 3 rotate 180, 4 mirror top-bottom,
/// 5 transpose, 6 rotate 90 clockwise, 7 transverse, 8 rotate 90 counter-
/// clockwise. Other values return the image unchanged.
Tensor apply_exif_orientation(const Tensor& rgb, int orientation);

}  // namespace magi2
