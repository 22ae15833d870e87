#include "engine/params.h"

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "engine/model_files.h"

namespace magi2 {

int64_t GenerateParams::pixel_width() const { return width ? width : (resolution == "540p" ? 896 : 448); }
int64_t GenerateParams::pixel_height() const { return height ? height : (resolution == "540p" ? 512 : 256); }

void validate(const EngineOptions& c) {
  MAGI2_CHECK(c.threads >= 0, "--threads must be >= 0, got ", c.threads);
  MAGI2_CHECK(c.device == "auto" || c.device == "cpu" || c.device == "cuda",
              "--device must be auto, cpu or cuda, got '", c.device, "'");
}

void validate(const GenerateParams& p) {
  MAGI2_CHECK(p.resolution == "272p" || p.resolution == "540p", "--resolution must be 272p or 540p, got '",
              p.resolution, "'");
  MAGI2_CHECK((p.width == 0) == (p.height == 0), "--width and --height go together");
  MAGI2_CHECK(p.steps == -1 || p.steps >= 1, "--num-inference-steps must be >= 1, got ", p.steps);
  for (const auto& [g, name] : {std::pair{p.video_guidance_scale, "video guidance scale"},
                                std::pair{p.audio_guidance_scale, "audio guidance scale"}})
    MAGI2_CHECK(!g || std::isfinite(*g), name, " must be a finite number, got ", g ? *g : 0.0);
  const bool decode = p.decodes();
  MAGI2_CHECK(decode || (p.outputs.output_width == 0 && p.outputs.output_height == 0),
              "--output-width/--output-height resize decoded frames: give -o FILE.mp4 or --save-frames too");
  MAGI2_CHECK(decode || p.thumbnail_path.empty(), "a thumbnail needs a decoded output (MP4, frames or WAV)");
  if (decode) check_output_plan(p.outputs, p.pixel_width(), p.pixel_height());
  MAGI2_CHECK(!p.enhance_prompt || p.text_features.empty(),
              "--enhance-prompt rewrites a prompt: it cannot go with --text-features");
  MAGI2_CHECK(p.save_prompt_path.empty() || p.text_features.empty(),
              "--save-prompt writes the encoded prompt: it cannot go with --text-features");
  check_output_path(p.save_prompt_path, "--save-prompt");
  if (!p.image.empty())
    MAGI2_CHECK(std::filesystem::is_regular_file(p.image), "--image ", p.image,
                std::filesystem::is_directory(p.image) ? ": is a folder, not an image file" : ": no such file");
}

}  // namespace magi2
