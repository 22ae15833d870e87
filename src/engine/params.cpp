#include "engine/params.h"

#include <cmath>
#include <iterator>
#include <utility>
#include <filesystem>

#include "core/error.h"
#include "engine/model_files.h"
#include "engine/text_conditioning.h"
#include "io/image.h"
#include "io/mmap_file.h"
#include "models/magi2_dit/offload.h"
#include "pipeline/reference_image.h"

namespace magi2 {

int64_t GenerateParams::pixel_width() const { return width ? width : (resolution == "272p" ? 448 : 896); }
int64_t GenerateParams::pixel_height() const { return height ? height : (resolution == "272p" ? 256 : 512); }

void validate(const EngineOptions& c) {
  MAGI2_CHECK(c.threads >= 0 && c.threads <= Limits::kMaxThreads, "--threads must be in [0, ", Limits::kMaxThreads,
              "] (0: all cores), got ", c.threads);
  MAGI2_CHECK(c.device == "auto" || c.device == "cpu" || c.device == "cuda",
              "--device must be auto, cpu or cuda, got '", c.device, "'");
  (void)expert_weights_from_name(c.weights, "--weights");
  (void)router_bias_from_ema(c.router_bias, "--router-bias");
  MAGI2_CHECK(c.text_encoder_device == "auto" || c.text_encoder_device == "cpu",
              "--text-encoder-device must be auto or cpu, got '", c.text_encoder_device, "'");
  MAGI2_CHECK(c.decoder_device == "auto" || c.decoder_device == "cpu", "--decoder-device must be auto or cpu, got '",
              c.decoder_device, "'");
  MAGI2_CHECK(c.refiner_device == "auto" || c.refiner_device == "cpu", "--refiner-device must be auto or cpu, got '",
              c.refiner_device, "'");
  (void)fp8_compute_from_name(c.fp8_compute, "--fp8-compute");
  (void)fp8_from_compute_name(c.attention_compute, "--attention-compute");
  (void)fp8_from_compute_name(c.linear_compute, "--linear-compute");
  (void)offload_from_name(c.offload, "--offload");
  validate(c.cuda);
}

namespace {

namespace fs = std::filesystem;

// Two paths name the same file (symlinks and "./" resolved as far as they exist).
bool same_path(const std::string& a, const std::string& b) {
  std::error_code ea, eb;
  const fs::path ca = fs::weakly_canonical(fs::absolute(a, ea), ea);
  const fs::path cb = fs::weakly_canonical(fs::absolute(b, eb), eb);
  return (!ea && !eb) ? ca == cb : a == b;
}

// Every output path differs from every input and from every other output:
// otherwise one write would destroy an input mid-run or a sibling output.
void check_paths_distinct(const GenerateParams& p) {
  const std::pair<std::string, const char*> outputs[] = {
      {p.outputs.mp4_path, "-o"},          {p.outputs.frames_dir, "--save-frames"},
      {p.outputs.wav_path, "--save-audio"}, {p.latents_path, "--save-latents"},
      {p.metrics_path, "--metrics"},        {p.thumbnail_path, "thumbnail"},
      {p.save_prompt_path, "--save-prompt"}};
  const std::pair<std::string, const char*> inputs[] = {{p.image, "--image"},
                                                        {p.refine_from, "--latents"},
                                                        {p.text_features, "--text-features"},
                                                        {p.noise, "--noise"},
                                                        {p.routing_override, "--routing-override"}};
  for (size_t i = 0; i < std::size(outputs); ++i) {
    const auto& [out, flag] = outputs[i];
    if (out.empty()) continue;
    for (const auto& [in, in_flag] : inputs)
      MAGI2_CHECK(in.empty() || !same_path(out, in), flag, " ", out, " is the input file of ", in_flag,
                  ": it would be overwritten");
    for (size_t j = i + 1; j < std::size(outputs); ++j)
      MAGI2_CHECK(outputs[j].first.empty() || !same_path(out, outputs[j].first), flag, " and ", outputs[j].second,
                  " both name ", out, ": give each output its own path");
  }
}

}  // namespace

void validate(const GenerateParams& p) {
  // Only a request that encodes its prompt needs one: --text-features brings
  // the features instead (and then the prompt is not read at all).
  if (p.text_features.empty()) require_prompt(p.prompt, p.label);
  MAGI2_CHECK(p.resolution == "272p" || p.resolution == "540p" || p.resolution == "1080p",
              "--resolution must be 272p, 540p or 1080p, got '", p.resolution, "'");
  MAGI2_CHECK(p.refines() || p.refine_from.empty(), "--latents (refine saved preview latents) needs --resolution 1080p");
  MAGI2_CHECK(p.refiner_steps == -1 || (p.refiner_steps >= 1 && p.refiner_steps <= Limits::kMaxSteps),
              "--refiner-num-inference-steps must be in [1, ", Limits::kMaxSteps, "], got ", p.refiner_steps);
  for (const auto& [v, flag] : {std::pair{p.refiner_width, "--refiner-width"}, std::pair{p.refiner_height, "--refiner-height"}})
    MAGI2_CHECK(v >= 16 && v <= Limits::kMaxRefinerSide && v % 16 == 0, flag, " must be a multiple of 16 in [16, ",
                Limits::kMaxRefinerSide, "], got ", v);
  MAGI2_CHECK(!p.refines() || static_cast<double>(p.refiner_width) * p.refiner_height * p.seconds <=
                                  Limits::kMaxRefinerPixelSeconds,
              "--refiner-width x --refiner-height x --seconds = ", p.refiner_width, " x ", p.refiner_height, " x ",
              p.seconds, " exceeds the largest refined clip (1920 x 1088 x 30 s)");
  if (!p.refine_from.empty()) {
    const std::string why = file_problem(p.refine_from);
    MAGI2_CHECK(why.empty(), "--latents ", p.refine_from, ": ", why);
  }
  MAGI2_CHECK((p.width == 0) == (p.height == 0), "--width and --height go together");
  MAGI2_CHECK(p.steps == -1 || (p.steps >= 1 && p.steps <= Limits::kMaxSteps),
              "--num-inference-steps must be in [1, ", Limits::kMaxSteps, "], got ", p.steps);
  for (const auto& [v, flag] : {std::pair{p.width, "--width"}, std::pair{p.height, "--height"}})
    MAGI2_CHECK(v == 0 || (v >= 16 && v <= Limits::kMaxSide && v % 16 == 0), flag,
                " must be a multiple of 16 in [16, ", Limits::kMaxSide, "], got ", v);
  MAGI2_CHECK(std::isfinite(p.seconds) && p.seconds > 0 && p.seconds <= Limits::kMaxSeconds,
              "--seconds must be in (0, ", Limits::kMaxSeconds, "], got ", p.seconds);
  const double pixel_seconds = static_cast<double>(p.pixel_width()) * p.pixel_height() * p.seconds;
  MAGI2_CHECK(pixel_seconds <= Limits::kMaxPixelSeconds, "--width x --height x --seconds = ", p.pixel_width(), " x ",
              p.pixel_height(), " x ", p.seconds, " exceeds the largest clip (896 x 512 x 30 s)");
  for (const auto& [v, flag] :
       {std::pair{p.outputs.output_width, "--output-width"}, std::pair{p.outputs.output_height, "--output-height"}})
    MAGI2_CHECK(v >= 0 && v <= Limits::kMaxOutputSide, flag, " must be in [1, ", Limits::kMaxOutputSide,
                "] (0: the decoded size), got ", v);
  for (const auto& [g, name] : {std::pair{p.video_guidance_scale, "video guidance scale"},
                                std::pair{p.audio_guidance_scale, "audio guidance scale"}})
    MAGI2_CHECK(!g || (std::isfinite(*g) && std::abs(*g) <= Limits::kMaxGuidance), name,
                " must be a finite number in [-100, 100], got ", g ? *g : 0.0);
  const bool decode = p.decodes();
  MAGI2_CHECK(decode || (p.outputs.output_width == 0 && p.outputs.output_height == 0),
              "--output-width/--output-height resize decoded frames: give -o FILE.mp4 or --save-frames too");
  MAGI2_CHECK(decode || p.thumbnail_path.empty(), "a thumbnail needs a decoded output (MP4, frames or WAV)");
  if (decode) check_output_plan(p.outputs, p.decoded_width(), p.decoded_height());
  MAGI2_CHECK(!p.enhance_prompt || p.text_features.empty(),
              "--enhance-prompt rewrites a prompt: it cannot go with --text-features");
  MAGI2_CHECK(p.save_prompt_path.empty() || p.text_features.empty(),
              "--save-prompt writes the encoded prompt: it cannot go with --text-features");
  check_output_path(p.save_prompt_path, "--save-prompt");
  check_paths_distinct(p);
  if (!p.image.empty()) {
    const std::string why = file_problem(p.image);  // names a folder, /dev/zero, a missing file
    MAGI2_CHECK(why.empty(), "--image ", p.image, ": ", why);
    // From the header only: an image the encoder cannot take at this size is
    // refused before anything is loaded or decoded.
    const ImageSize size = probe_image_size(p.image);
    const std::string geometry = reference_size_problem(size.width, size.height, p.pixel_width(), p.pixel_height());
    MAGI2_CHECK(geometry.empty(), "--image ", p.image, ": ", geometry);
  }
}

}  // namespace magi2
