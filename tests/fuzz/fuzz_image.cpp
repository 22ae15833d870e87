// libFuzzer harness: PNG / JPEG decoding to RGB (libpng, libjpeg-turbo, EXIF
// orientation) from memory, with the header limits of io/image.h.
#include "core/error.h"
#include "io/image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const magi2::Tensor rgb = magi2::decode_image_rgb(data, size, "fuzz image");
    (void)rgb.numel();
    (void)magi2::exif_orientation(data, size);
  } catch (const magi2::Error&) {
  }
  return 0;
}
