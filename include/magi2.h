/* magi2.h: the C API of magi2.cpp (libmagi2.so), the MAGI-2 Preview
 * audio+video engine. One engine = one loaded model; generate runs one request
 * at a time (calls on one engine must not overlap; separate engines may run on
 * separate threads). Every call that can fail returns a magi2_status and
 * leaves a one-line message in magi2_last_error() on the calling thread.
 * Request fields mirror `magi2 generate`'s flags (docs/server.md and README). */
#ifndef MAGI2_H
#define MAGI2_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  MAGI2_OK = 0,
  MAGI2_ERR_INVALID = 1,   /* bad argument, file, tensor or option (the message names it) */
  MAGI2_ERR_FAILED = 2,    /* the work failed (I/O, out of memory, internal) */
  MAGI2_ERR_CANCELLED = 3  /* should_cancel asked to stop: nothing was written */
} magi2_status;

typedef struct magi2_engine magi2_engine;

/* How to load an engine. Strings may be NULL (= unset). */
typedef struct {
  const char* model;         /* model folder (official layout) or "builtin:tiny" (default) */
  const char* cache_dir;     /* where builtin:tiny is made and kept (required for it) */
  const char* config;        /* config JSON overriding MODEL/config.json */
  const char* transformer;   /* DiT folder overriding MODEL/preview */
  const char* text_encoder;  /* Qwen3.5 folder overriding MODEL/text_encoder */
  int threads;               /* CPU threads, 0 = all */
  const char* device;        /* "auto" (default), "cpu" or "cuda" */
  /* Bytes the DiT's device may hold; 0 = the GPU's free memory (CUDA) or the
     host's RAM (CPU). A request whose memory plan exceeds it fails with
     MAGI2_ERR_INVALID before loading, the message saying what would fit. */
  unsigned long long max_device_memory;
  /* Router bias that selects the experts: "ema" (default, as the official
     loader) or "main" (diagnostic); the CLI's --router-bias. */
  const char* router_bias;
  /* CUDA attention kernel: "auto" (default: cuDNN where it applies) or "fp32"
     (always the fp32 kernel); the CLI's --cuda-attention. */
  const char* cuda_attention;
  /* Where the Qwen3.5 text encoder runs: "auto" (default, the `device`
     backend) or "cpu" (the reference backend); the CLI's --text-encoder-device. */
  const char* text_encoder_device;
  /* How FP8 routed experts compute: "w8a16" (default, bf16 activations) or
     "w8a8" (e4m3 activations in 1x128 groups); the CLI's --fp8-compute. */
  const char* fp8_compute;
  /* Where the codecs run (TurboVAE, Stable Audio Open, the Wan2.2 image
     encoder): "auto" (default, the `device` backend; on a GPU loaded after the
     DiT is freed when they do not fit beside it) or "cpu" (the reference
     backend); the CLI's --decoder-device. */
  const char* decoder_device;
  /* Where the DiT's weights live: "none" (default, all on the device) or
     "layerwise" (CUDA: layer weights in pinned host memory, streamed into two
     device layer slots; nothing changes on the CPU backend); the CLI's --offload. */
  const char* offload;
  /* How the DiT's self-attention computes: "bf16" (default) or "fp8" (e4m3
     Q, K, V and P, bf16 output; an experiment, docs/fp8.md); the CLI's
     --attention-compute. */
  const char* attention_compute;
  /* How the DiT's dense linears compute: "bf16" (default) or "fp8" (W8A8:
     weights quantised at load with 128 x 128 block scales, activations per
     1 x 128 group; an experiment, docs/fp8.md); the CLI's --linear-compute. */
  const char* linear_compute;
} magi2_engine_options;

/* One request. Strings may be NULL (= unset); outputs left NULL are not written. */
typedef struct {
  const char* prompt;           /* required: some non-whitespace text (else MAGI2_ERR_INVALID) */
  const char* negative_prompt;  /* NULL: the official one */
  const char* image;            /* I2VA reference image (PNG/JPEG) */
  double seconds;               /* clip length; default 10 */
  int width, height;            /* pixels, multiples of 16; 0: 448x256 */
  uint64_t seed;                /* default 42 */
  int steps;                    /* denoising steps; -1: the config's */
  double video_guidance_scale;  /* < 0: the config's */
  double audio_guidance_scale;  /* < 0: the config's */
  const char* output_mp4;       /* the clip (MP4 with sound) */
  const char* output_wav;       /* the sound alone (WAV, 16-bit) */
  const char* output_thumbnail; /* the first frame (PNG) */
  const char* output_latents;   /* the final latents (safetensors) */
  /* Callbacks (may be NULL), called on the calling thread; `user` is passed back. */
  void (*on_progress)(int step, int steps, double eta_seconds, void* user);
  int (*should_cancel)(void* user); /* non-zero: stop at the next step boundary */
  int preview_every;                /* > 0: on_preview every N steps */
  void (*on_preview)(int step, const unsigned char* png, size_t png_size, void* user);
  void* user;
} magi2_generate_params;

/* What a finished request produced (hex SHA-256 of the decoded arrays). */
typedef struct {
  char video_sha256[65]; /* uint8 frames [T, H, W, 3]; "" without a decoded output */
  char audio_sha256[65]; /* f32 audio [N, 2] */
  int steps;             /* steps run */
} magi2_result;

/* Defaults (builtin:tiny, all threads, device "auto"). */
void magi2_engine_options_init(magi2_engine_options* o);
/* Defaults (10 s at 448x256, seed 42, the config's steps and scales, no outputs). */
void magi2_generate_params_init(magi2_generate_params* p);

/* Loads the model; *out is NULL on error. */
magi2_status magi2_engine_create(const magi2_engine_options* o, magi2_engine** out);
/* Frees an engine (NULL is fine). */
void magi2_engine_free(magi2_engine* e);
/* Runs one request; `result` may be NULL. */
magi2_status magi2_generate(magi2_engine* e, const magi2_generate_params* p, magi2_result* result);
/* The message of the last failed call on this thread ("" when none). */
const char* magi2_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* MAGI2_H */
