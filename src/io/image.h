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
/// format, or a corrupt/truncated stream (the decoder's message appended).
Tensor load_image_rgb(const std::string& path);

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
