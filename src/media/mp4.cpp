#include "media/mp4.h"
#include "media/wav.h"

#include "io/temp_files.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>

#if MAGI2_HAVE_FFMPEG
extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/channel_layout.h>
#include <libavutil/error.h>
#include <libavutil/log.h>
#include <libavutil/opt.h>
#include <libavutil/rational.h>
#include <libswscale/swscale.h>
}
#endif

namespace magi2 {

#if MAGI2_HAVE_FFMPEG
namespace {

std::string av_error_text(int rc) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {0};
  av_strerror(rc, buf, sizeof buf);
  return buf;
}

std::string version_text(unsigned v) {
  return str_cat(AV_VERSION_MAJOR(v), ".", AV_VERSION_MINOR(v), ".", AV_VERSION_MICRO(v));
}

struct CodecCtxFree {
  void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
};
struct FrameFree {
  void operator()(AVFrame* f) const { av_frame_free(&f); }
};
struct PacketFree {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};
struct SwsFree {
  void operator()(SwsContext* s) const { sws_freeContext(s); }
};
// Closes the file (if open) and frees the muxer.
struct FormatFree {
  void operator()(AVFormatContext* oc) const {
    if (oc->pb) avio_closep(&oc->pb);
    avformat_free_context(oc);
  }
};
using CodecCtxPtr = std::unique_ptr<AVCodecContext, CodecCtxFree>;
using FramePtr = std::unique_ptr<AVFrame, FrameFree>;

// Removes the temporary file unless the write completed.
struct TempFile {
  std::string path;
  TempFileGuard guard{path};  // removed on SIGINT/SIGTERM too
  bool keep = false;
  ~TempFile() {
    if (!keep) ::unlink(path.c_str());
  }
};

// One encoder feeding one output stream.
struct Track {
  CodecCtxPtr ctx;
  AVStream* stream = nullptr;
};

class Mp4Muxer {
 public:
  Mp4Muxer(std::string path, std::string tmp) : path_(std::move(path)), tmp_(std::move(tmp)) {}

  // Throws Error("mp4 '<path>': <step>: <FFmpeg message>") when rc < 0.
  void check(int rc, const char* step) const {
    MAGI2_CHECK(rc >= 0, "mp4 '", path_, "': ", step, ": ", av_error_text(rc));
  }
  [[noreturn]] void fail(const std::string& msg) const { throw Error(str_cat("mp4 '", path_, "': ", msg)); }

  void open_container() {
    AVFormatContext* oc = nullptr;
    check(avformat_alloc_output_context2(&oc, nullptr, "mp4", tmp_.c_str()), "creating the MP4 muxer");
    oc_.reset(oc);
    av_dict_set(&oc_->metadata, "encoder", LIBAVFORMAT_IDENT, 0);
  }

  Track add_video(int width, int height, AVRational fps, const Mp4Options& o) {
    const AVCodec* codec = avcodec_find_encoder_by_name("libx264");
    if (!codec) fail("this FFmpeg has no libx264 encoder");
    Track t{CodecCtxPtr(avcodec_alloc_context3(codec)), nullptr};
    if (!t.ctx) fail("out of memory");
    AVCodecContext* c = t.ctx.get();
    c->width = width;
    c->height = height;
    c->pix_fmt = AV_PIX_FMT_YUV420P;
    c->time_base = av_inv_q(fps);
    c->framerate = fps;
    c->colorspace = AVCOL_SPC_SMPTE170M;  // the matrix swscale's default conversion uses
    c->color_range = AVCOL_RANGE_MPEG;
    c->thread_count = o.x264_threads;
    if (oc_->oformat->flags & AVFMT_GLOBALHEADER) c->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    AVDictionary* opts = nullptr;
    av_dict_set(&opts, "preset", o.preset.c_str(), 0);
    av_dict_set_int(&opts, "crf", o.crf, 0);
    const int rc = avcodec_open2(c, codec, &opts);
    av_dict_free(&opts);
    check(rc, "opening libx264");
    t.stream = new_stream(c);
    t.stream->avg_frame_rate = fps;
    return t;
  }

  Track add_audio(int sample_rate, int channels, int bitrate) {
    const AVCodec* codec = avcodec_find_encoder(AV_CODEC_ID_AAC);
    if (!codec) fail("this FFmpeg has no AAC encoder");
    Track t{CodecCtxPtr(avcodec_alloc_context3(codec)), nullptr};
    if (!t.ctx) fail("out of memory");
    AVCodecContext* c = t.ctx.get();
    c->sample_fmt = AV_SAMPLE_FMT_FLTP;
    c->sample_rate = sample_rate;
    av_channel_layout_default(&c->ch_layout, channels);
    c->bit_rate = bitrate;
    c->time_base = AVRational{1, sample_rate};
    if (oc_->oformat->flags & AVFMT_GLOBALHEADER) c->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    check(avcodec_open2(c, codec, nullptr), "opening the AAC encoder");
    if (c->frame_size <= 0) fail("AAC encoder reports no frame size");
    t.stream = new_stream(c);
    return t;
  }

  // `movie_timescale`: ticks per second of the MP4's movie header and edit lists.
  void begin(int64_t movie_timescale) {
    check(avio_open(&oc_->pb, tmp_.c_str(), AVIO_FLAG_WRITE), "opening the output file");
    AVDictionary* opts = nullptr;
    av_dict_set_int(&opts, "movie_timescale", movie_timescale, 0);
    const int rc = avformat_write_header(oc_.get(), &opts);
    av_dict_free(&opts);
    check(rc, "writing the MP4 header");
  }

  // Sends one frame (or nullptr to flush) and writes every packet that comes out.
  void encode(Track& t, const AVFrame* frame) {
    check(avcodec_send_frame(t.ctx.get(), frame), "encoding");
    for (;;) {
      const int rc = avcodec_receive_packet(t.ctx.get(), pkt_.get());
      if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return;
      check(rc, "encoding");
      av_packet_rescale_ts(pkt_.get(), t.ctx->time_base, t.stream->time_base);
      pkt_->stream_index = t.stream->index;
      check(av_interleaved_write_frame(oc_.get(), pkt_.get()), "writing a packet");
    }
  }

  void finish() {
    check(av_write_trailer(oc_.get()), "finishing the MP4");
    check(avio_closep(&oc_->pb), "closing the output file");
  }

 private:
  AVStream* new_stream(const AVCodecContext* c) {
    AVStream* st = avformat_new_stream(oc_.get(), nullptr);
    if (!st) fail("out of memory");
    check(avcodec_parameters_from_context(st->codecpar, c), "configuring a stream");
    st->time_base = c->time_base;
    return st;
  }

  std::string path_, tmp_;
  std::unique_ptr<AVFormatContext, FormatFree> oc_;
  std::unique_ptr<AVPacket, PacketFree> pkt_{av_packet_alloc()};
};

FramePtr alloc_frame(const Mp4Muxer& mux) {
  FramePtr f(av_frame_alloc());
  if (!f) mux.fail("out of memory");
  return f;
}

}  // namespace

bool mp4_supported() {
  return avcodec_find_encoder_by_name("libx264") != nullptr &&
         avcodec_find_encoder(AV_CODEC_ID_AAC) != nullptr;
}

std::string mp4_library_versions() {
  return str_cat("libavformat ", version_text(avformat_version()), ", libavcodec ",
                 version_text(avcodec_version()), ", libswscale ", version_text(swscale_version()));
}

void write_mp4(const std::string& path, const Clip& clip, const Mp4Options& options) {
  const std::string what = str_cat("mp4 '", path, "'");
  check_frames(clip.frames, what);
  const bool has_audio = clip.audio.defined();
  if (has_audio) check_audio(clip.audio, clip.sample_rate, what);
  const int t = static_cast<int>(clip.frames.size(0));
  const int h = static_cast<int>(clip.frames.size(1));
  const int w = static_cast<int>(clip.frames.size(2));
  MAGI2_CHECK(w % 2 == 0 && h % 2 == 0, what, ": H.264 yuv420p needs an even width and height, got ",
              w, "x", h, " (use --output-width/--output-height)");
  const AVRational fps = av_d2q(clip.fps, 1001);
  MAGI2_CHECK(clip.fps > 0 && fps.num > 0 && std::fabs(av_q2d(fps) - clip.fps) < 1e-9, what,
              ": frame rate ", clip.fps, " is not a simple fraction");
  MAGI2_CHECK(options.crf >= 0 && options.crf <= 51, what, ": crf ", options.crf, " outside 0..51");
  // x264's informational lines (capabilities, statistics) would flood the CLI.
  if (av_log_get_level() > AV_LOG_WARNING) av_log_set_level(AV_LOG_WARNING);

  TempFile tmp{str_cat(path, ".tmp.", ::getpid())};
  Mp4Muxer mux(path, tmp.path);
  mux.open_container();
  Track video = mux.add_video(w, h, fps, options);
  Track audio;
  if (has_audio) audio = mux.add_audio(clip.sample_rate, 2, options.audio_bitrate);
  // The edit lists (which hide the AAC priming and end each track) count in the
  // movie timescale. FFmpeg's default, 1000, would cut the audio to whole
  // milliseconds; a multiple of the sample rate that one video frame also divides
  // (44100 for 12.5 fps) keeps both tracks' durations exact.
  const int64_t frame_ticks_den = fps.num / std::gcd(fps.num, fps.den);
  mux.begin(std::lcm<int64_t>(has_audio ? clip.sample_rate : 1000, frame_ticks_den));

  std::unique_ptr<SwsContext, SwsFree> sws(sws_getContext(w, h, AV_PIX_FMT_RGB24, w, h, AV_PIX_FMT_YUV420P,
                                                          SWS_BICUBIC, nullptr, nullptr, nullptr));
  if (!sws) mux.fail("cannot create the rgb24 -> yuv420p converter");
  FramePtr yuv = alloc_frame(mux);
  yuv->format = AV_PIX_FMT_YUV420P;
  yuv->width = w;
  yuv->height = h;
  mux.check(av_frame_get_buffer(yuv.get(), 0), "allocating a video frame");

  const int64_t n_samples = has_audio ? clip.audio.size(0) : 0;
  const int frame_size = has_audio ? audio.ctx->frame_size : 0;
  const float* pcm = has_audio ? clip.audio.data_as<float>() : nullptr;
  int64_t audio_pos = 0;
  FramePtr aframe = alloc_frame(mux);

  // Audio up to (not including) sample `until`, in encoder-sized frames; the last
  // frame may be short (the AAC encoder accepts a small final frame).
  auto send_audio_until = [&](int64_t until) {
    until = std::min(until, n_samples);
    while (audio_pos < until) {
      const int n = static_cast<int>(std::min<int64_t>(frame_size, n_samples - audio_pos));
      if (n < frame_size && until < n_samples) return;  // a short frame only at the very end
      av_frame_unref(aframe.get());
      aframe->format = AV_SAMPLE_FMT_FLTP;
      aframe->sample_rate = clip.sample_rate;
      aframe->nb_samples = n;
      mux.check(av_channel_layout_copy(&aframe->ch_layout, &audio.ctx->ch_layout), "audio layout");
      mux.check(av_frame_get_buffer(aframe.get(), 0), "allocating an audio frame");
      auto* left = reinterpret_cast<float*>(aframe->data[0]);
      auto* right = reinterpret_cast<float*>(aframe->data[1]);
      for (int i = 0; i < n; ++i) {
        // Clipped where the PCM16 WAV clips (the official file is muxed from it).
        left[i] = clip_to_pcm16_range(pcm[2 * (audio_pos + i)]);
        right[i] = clip_to_pcm16_range(pcm[2 * (audio_pos + i) + 1]);
      }
      aframe->pts = audio_pos;
      mux.encode(audio, aframe.get());
      audio_pos += n;
    }
  };

  const auto* rgb = clip.frames.data_as<uint8_t>();
  for (int i = 0; i < t; ++i) {
    // Keep the streams interleaved in time: audio up to the end of this frame first.
    if (has_audio)
      send_audio_until(av_rescale_q(i + 1, av_inv_q(fps), AVRational{1, clip.sample_rate}));
    mux.check(av_frame_make_writable(yuv.get()), "video frame");
    const uint8_t* src[1] = {rgb + static_cast<size_t>(i) * h * w * 3};
    const int stride[1] = {w * 3};
    sws_scale(sws.get(), src, stride, 0, h, yuv->data, yuv->linesize);
    yuv->pts = i;
    mux.encode(video, yuv.get());
  }
  if (has_audio) {
    send_audio_until(n_samples);
    mux.encode(audio, nullptr);
  }
  mux.encode(video, nullptr);
  mux.finish();
  MAGI2_CHECK(std::rename(tmp.path.c_str(), path.c_str()) == 0, "cannot rename '", tmp.path,
              "' to '", path, "'");
  tmp.keep = true;
}

#else  // !MAGI2_HAVE_FFMPEG

bool mp4_supported() { return false; }

std::string mp4_library_versions() { return "FFmpeg not available in this build"; }

void write_mp4(const std::string& path, const Clip&, const Mp4Options&) {
  throw Error(str_cat("cannot write '", path,
                      "': this build has no FFmpeg (MP4 output needs libavformat/libavcodec/libswscale); "
                      "use --save-frames DIR and --save-audio FILE.wav instead"));
}

#endif  // MAGI2_HAVE_FFMPEG

}  // namespace magi2
