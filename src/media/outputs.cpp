#include "media/outputs.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "io/mmap_file.h"
#include "media/png.h"

namespace magi2 {
namespace {

namespace fs = std::filesystem;

// The directory that will receive `path` must exist and be writable.
void check_parent_writable(const std::string& path, const std::string& flag) {
  fs::path parent = fs::path(path).parent_path();
  if (parent.empty()) parent = ".";
  const std::string why = folder_problem(parent.string());
  MAGI2_CHECK(why.empty(), flag, " ", path, ": directory '", parent.string(), "' ", why);
  MAGI2_CHECK(::access(parent.c_str(), W_OK) == 0, flag, " ", path, ": directory '", parent.string(),
              "' is not writable");
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

void check_output_plan(const OutputPlan& plan, int64_t width, int64_t height) {
  MAGI2_CHECK((plan.output_width == 0) == (plan.output_height == 0),
              "--output-width and --output-height go together");
  MAGI2_CHECK(plan.output_width >= 0 && plan.output_height >= 0, "--output-width/--output-height must be >= 1, got ",
              plan.output_width, "x", plan.output_height);
  const int64_t w = plan.output_width ? plan.output_width : width;
  const int64_t h = plan.output_height ? plan.output_height : height;
  if (!plan.mp4_path.empty()) {
    MAGI2_CHECK(mp4_supported(), "-o ", plan.mp4_path,
                ": this build has no FFmpeg, so it cannot write MP4; use --save-frames DIR and "
                "--save-audio FILE.wav (install libavformat-dev libavcodec-dev libswscale-dev and rebuild for MP4)");
    MAGI2_CHECK(plan.mp4_path.ends_with(".mp4"), "-o ", plan.mp4_path, ": the video output must end in .mp4");
    MAGI2_CHECK(w % 2 == 0 && h % 2 == 0, "-o ", plan.mp4_path, ": H.264 yuv420p needs an even size, got ", w,
                "x", h, " (set --output-width/--output-height)");
    MAGI2_CHECK(plan.mp4.crf >= 0 && plan.mp4.crf <= 51, "crf must be in 0..51, got ", plan.mp4.crf);
    check_parent_writable(plan.mp4_path, "-o");
  }
  if (!plan.wav_path.empty()) check_parent_writable(plan.wav_path, "--save-audio");
  if (!plan.frames_dir.empty()) {
    std::error_code ec;
    if (fs::exists(plan.frames_dir, ec)) {
      MAGI2_CHECK(fs::is_directory(plan.frames_dir), "--save-frames ", plan.frames_dir, ": not a directory");
      MAGI2_CHECK(::access(plan.frames_dir.c_str(), W_OK) == 0, "--save-frames ", plan.frames_dir,
                  ": directory is not writable");
    } else {
      // Created at write time; its nearest existing ancestor must be writable.
      fs::path p = fs::absolute(plan.frames_dir).parent_path();
      while (!p.empty() && !fs::exists(p, ec) && p != p.root_path()) p = p.parent_path();
      MAGI2_CHECK(fs::is_directory(p) && ::access(p.c_str(), W_OK) == 0, "--save-frames ", plan.frames_dir,
                  ": cannot create it under '", p.string(), "'");
    }
  }
}

OutputReport write_outputs(const Clip& clip, const OutputPlan& plan) {
  using clock = std::chrono::steady_clock;
  check_frames(clip.frames, "outputs");
  OutputReport r;
  Clip out = clip;
  auto t0 = clock::now();
  if (plan.output_width || plan.output_height) {
    out.frames = resize_frames_bilinear(clip.frames, plan.output_width, plan.output_height,
                                        plan.resize_rounding);
    r.resize_ms = ms_since(t0);
  }
  t0 = clock::now();
  r.hashes = clip_sha256(out);
  if (out.frames.data() != clip.frames.data()) r.video_sha256_decoded = tensor_sha256_hex(clip.frames);
  r.hash_ms = ms_since(t0);
  r.video_shape = out.frames.shape();
  if (out.audio.defined()) r.audio_shape = out.audio.shape();
  r.fps = out.fps;
  r.sample_rate = out.sample_rate;

  if (!plan.frames_dir.empty()) {
    t0 = clock::now();
    save_frames_png(plan.frames_dir, out.frames);
    r.frames_ms = ms_since(t0);
  }
  if (!plan.wav_path.empty()) {
    MAGI2_CHECK(out.audio.defined(), "--save-audio ", plan.wav_path, ": the clip has no audio");
    t0 = clock::now();
    write_wav(plan.wav_path, out.audio, out.sample_rate, plan.wav_format);
    r.wav_ms = ms_since(t0);
  }
  if (!plan.mp4_path.empty()) {
    t0 = clock::now();
    write_mp4(plan.mp4_path, out, plan.mp4);
    r.mp4_ms = ms_since(t0);
    r.mp4_sha256 = sha256_file_hex(plan.mp4_path);
    r.mp4_bytes = static_cast<int64_t>(fs::file_size(plan.mp4_path));
  }
  return r;
}

nlohmann::json OutputReport::to_json(const OutputPlan& plan) const {
  using nlohmann::json;
  json j;
  j["video_sha256"] = hashes.video;
  j["video_shape"] = video_shape;
  j["fps"] = fps;
  if (!hashes.audio.empty()) {
    j["audio_sha256"] = hashes.audio;
    j["audio_shape"] = audio_shape;
    j["sample_rate"] = sample_rate;
  }
  if (!video_sha256_decoded.empty()) {
    j["video_sha256_decoded"] = video_sha256_decoded;
    j["resize"] = {{"width", plan.output_width},
                   {"height", plan.output_height},
                   {"rounding", plan.resize_rounding == ResizeRounding::Truncate ? "truncate" : "nearest"},
                   {"ms", resize_ms}};
  }
  j["hash_ms"] = hash_ms;
  if (!plan.mp4_path.empty())
    j["mp4"] = {{"path", plan.mp4_path},       {"sha256", mp4_sha256},
                {"bytes", mp4_bytes},          {"crf", plan.mp4.crf},
                {"preset", plan.mp4.preset},   {"audio_bitrate", plan.mp4.audio_bitrate},
                {"x264_threads", plan.mp4.x264_threads}, {"libraries", mp4_library_versions()},
                {"ms", mp4_ms}};
  if (!plan.frames_dir.empty()) j["frames"] = {{"dir", plan.frames_dir}, {"ms", frames_ms}};
  if (!plan.wav_path.empty())
    j["wav"] = {{"path", plan.wav_path},
                {"format", plan.wav_format == WavFormat::Pcm16 ? "pcm16" : "float32"},
                {"ms", wav_ms}};
  return j;
}

}  // namespace magi2
