// The C API (include/magi2.h) over the engine: C structs -> EngineOptions /
// GenerateParams, exceptions -> status codes + a thread-local message.
#include "magi2.h"

#include <cstring>
#include <new>
#include <string>

#include "core/error.h"
#include "engine/engine.h"

struct magi2_engine {
  magi2::Engine engine;
  explicit magi2_engine(const magi2::EngineOptions& o) : engine(o) {}
};

namespace {

thread_local std::string last_error;

std::string str(const char* s) { return s ? std::string(s) : std::string(); }

// Runs `fn`, mapping exceptions to a status and the message of last_error.
template <typename F>
magi2_status guarded(F&& fn) {
  last_error.clear();
  try {
    return fn();
  } catch (const magi2::Error& e) {
    last_error = e.what();
    return MAGI2_ERR_INVALID;
  } catch (const std::bad_alloc&) {
    last_error = "out of memory";
    return MAGI2_ERR_FAILED;
  } catch (const std::exception& e) {
    last_error = e.what();
    return MAGI2_ERR_FAILED;
  }
}

void copy_hex(char (&dst)[65], const std::string& src) {
  std::strncpy(dst, src.c_str(), 64);
  dst[64] = '\0';
}

}  // namespace

extern "C" {

void magi2_engine_options_init(magi2_engine_options* o) {
  if (!o) return;
  *o = {};
  o->model = magi2::kBuiltinTiny;
  o->device = "auto";
}

void magi2_generate_params_init(magi2_generate_params* p) {
  if (!p) return;
  *p = {};
  p->seconds = 10.0;
  p->seed = 42;
  p->steps = -1;
  p->video_guidance_scale = -1;
  p->audio_guidance_scale = -1;
}

magi2_status magi2_engine_create(const magi2_engine_options* o, magi2_engine** out) {
  if (out) *out = nullptr;
  return guarded([&] {
    MAGI2_CHECK(o && out, "magi2_engine_create: options and out must not be NULL");
    magi2::EngineOptions eo;
    if (o->model) eo.model = o->model;
    eo.cache.cache_dir = str(o->cache_dir);
    eo.config = str(o->config);
    eo.transformer = str(o->transformer);
    eo.text_encoder = str(o->text_encoder);
    eo.threads = o->threads;
    if (o->device) eo.device = o->device;
    eo.max_device_memory = o->max_device_memory;
    if (o->router_bias) eo.router_bias = o->router_bias;
    if (o->cuda_attention) eo.cuda.attention = o->cuda_attention;
    if (o->text_encoder_device) eo.text_encoder_device = o->text_encoder_device;
    if (o->fp8_compute) eo.fp8_compute = o->fp8_compute;
    if (o->decoder_device) eo.decoder_device = o->decoder_device;
    if (o->offload) eo.offload = o->offload;
    if (o->attention_compute) eo.attention_compute = o->attention_compute;
    if (o->linear_compute) eo.linear_compute = o->linear_compute;
    MAGI2_CHECK(eo.model.rfind("builtin:", 0) != 0 || !eo.cache.cache_dir.empty(),
                "magi2_engine_create: model ", eo.model, " needs cache_dir");
    *out = new magi2_engine(eo);
    return MAGI2_OK;
  });
}

void magi2_engine_free(magi2_engine* e) { delete e; }

magi2_status magi2_generate(magi2_engine* e, const magi2_generate_params* p, magi2_result* result) {
  if (result) *result = {};
  return guarded([&] {
    MAGI2_CHECK(e && p, "magi2_generate: engine and params must not be NULL");
    MAGI2_CHECK(p->prompt, "magi2_generate: prompt must not be NULL");
    magi2::GenerateParams g;
    g.label = "prompt";
    g.prompt = p->prompt;
    g.negative_prompt = str(p->negative_prompt);
    g.image = str(p->image);
    g.seconds = p->seconds;
    g.width = p->width;
    g.height = p->height;
    g.seed = p->seed;
    g.steps = p->steps;
    if (p->video_guidance_scale >= 0) g.video_guidance_scale = p->video_guidance_scale;
    if (p->audio_guidance_scale >= 0) g.audio_guidance_scale = p->audio_guidance_scale;
    g.outputs.mp4_path = str(p->output_mp4);
    g.outputs.wav_path = str(p->output_wav);
    g.thumbnail_path = str(p->output_thumbnail);
    g.latents_path = str(p->output_latents);
    MAGI2_CHECK(g.decodes() || !g.latents_path.empty(),
                "magi2_generate: no output (set output_mp4, output_wav or output_latents)");
    magi2::GenerateCallbacks cb;
    if (p->on_progress)
      cb.on_progress = [p](const magi2::Progress& pr) { p->on_progress(pr.step, pr.steps, pr.eta_s, p->user); };
    if (p->should_cancel) cb.should_cancel = [p] { return p->should_cancel(p->user) != 0; };
    cb.preview_every = p->preview_every;
    if (p->on_preview)
      cb.on_preview = [p](const magi2::Preview& pv) {
        p->on_preview(pv.step, reinterpret_cast<const unsigned char*>(pv.png.data()), pv.png.size(), p->user);
      };
    const magi2::GenerateOutcome o = e->engine.generate(g, cb);
    if (result) {
      copy_hex(result->video_sha256, o.report.hashes.video);
      copy_hex(result->audio_sha256, o.report.hashes.audio);
      result->steps = o.steps;
    }
    if (o.cancelled) {
      last_error = "cancelled by should_cancel";
      return MAGI2_ERR_CANCELLED;
    }
    return MAGI2_OK;
  });
}

const char* magi2_last_error(void) { return last_error.c_str(); }

}  // extern "C"
