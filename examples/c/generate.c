/* The C API in a few lines: load builtin:tiny, make a short clip with progress.
 * Usage: magi2_c_example CACHE_DIR OUT.mp4 */
#include <stdio.h>

#include "magi2.h"

static void progress(int step, int steps, double eta, void* user) {
  (void)user;
  fprintf(stderr, "step %d/%d, %.1f s left\n", step, steps, eta);
}

int main(int argc, char** argv) {
  if (argc != 3) return fprintf(stderr, "usage: %s CACHE_DIR OUT.mp4\n", argv[0]), 2;
  magi2_engine_options o;
  magi2_engine_options_init(&o);
  o.cache_dir = argv[1];
  magi2_engine* e = NULL;
  if (magi2_engine_create(&o, &e) != MAGI2_OK) return fprintf(stderr, "error: %s\n", magi2_last_error()), 1;
  magi2_generate_params p;
  magi2_generate_params_init(&p);
  p.prompt = "A red fox trots through fresh snow at dawn.";
  p.seconds = 0.2, p.width = 32, p.height = 32, p.steps = 2;
  p.output_mp4 = argv[2];
  p.on_progress = progress;
  magi2_result r;
  const magi2_status s = magi2_generate(e, &p, &r);
  if (s == MAGI2_OK) printf("video sha256 %s\naudio sha256 %s\n", r.video_sha256, r.audio_sha256);
  else fprintf(stderr, "error: %s\n", magi2_last_error());
  magi2_engine_free(e);
  return s == MAGI2_OK ? 0 : 1;
}
