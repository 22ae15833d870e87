#include "media/clip.h"

namespace magi2 {

void check_frames(const Tensor& frames, const std::string& what) {
  MAGI2_CHECK(frames.defined(), what, ": no video frames");
  MAGI2_CHECK(frames.device() == Device::CPU && frames.dtype() == DType::U8 && frames.dim() == 4 &&
                  frames.size(3) == 3 && frames.is_contiguous(),
              what, ": video frames must be a contiguous CPU U8 [T, H, W, 3] tensor, got ",
              dtype_name(frames.dtype()), " ", shape_str(frames.shape()));
  MAGI2_CHECK(frames.size(0) >= 1 && frames.size(1) >= 1 && frames.size(2) >= 1, what,
              ": empty video frames ", shape_str(frames.shape()));
}

void check_audio(const Tensor& audio, int sample_rate, const std::string& what) {
  MAGI2_CHECK(audio.defined(), what, ": no audio");
  MAGI2_CHECK(audio.device() == Device::CPU && audio.dtype() == DType::F32 && audio.dim() == 2 &&
                  audio.size(1) == 2 && audio.is_contiguous(),
              what, ": audio must be a contiguous CPU F32 [N, 2] tensor, got ",
              dtype_name(audio.dtype()), " ", shape_str(audio.shape()));
  MAGI2_CHECK(audio.size(0) >= 1, what, ": empty audio ", shape_str(audio.shape()));
  MAGI2_CHECK(sample_rate > 0, what, ": bad audio sample rate ", sample_rate);
}

}  // namespace magi2
