// The C API (include/magi2.h, libmagi2.so) on the built-in tiny model: the
// digests match `magi2 generate` for the same request, progress reaches every
// step, should_cancel stops before any output, bad input is a status + message.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "magi2.h"
#include "util/cli.h"
#include "util/testing.h"

namespace magi2::test {
namespace {

struct Counts {
  int progress = 0, last_step = 0, cancel_after = -1, previews = 0;
};

void on_progress(int step, int, double, void* user) {
  auto* c = static_cast<Counts*>(user);
  ++c->progress;
  c->last_step = step;
}
int should_cancel(void* user) {
  auto* c = static_cast<Counts*>(user);
  return c->cancel_after >= 0 && c->progress >= c->cancel_after;
}
void on_preview(int, const unsigned char* png, size_t size, void* user) {
  ASSERT_GT(size, 8u);
  EXPECT_EQ(png[1], 'P');
  ++static_cast<Counts*>(user)->previews;
}

TEST(CApi, GeneratesTheCliClipAndCancels) {
  const std::string dir = temp_dir("c_api");
  const std::string cache = dir + "/cache";
  magi2_engine_options o;
  magi2_engine_options_init(&o);
  o.threads = 1;
  magi2_engine* e = nullptr;
  ASSERT_EQ(magi2_engine_create(&o, &e), MAGI2_ERR_INVALID);  // builtin:tiny without cache_dir
  EXPECT_NE(std::string(magi2_last_error()).find("cache_dir"), std::string::npos);
  o.cache_dir = cache.c_str();
  o.router_bias = "mean";  // the CLI's --router-bias, checked before anything loads
  ASSERT_EQ(magi2_engine_create(&o, &e), MAGI2_ERR_INVALID);
  EXPECT_NE(std::string(magi2_last_error()).find("--router-bias"), std::string::npos);
  o.router_bias = "ema";
  o.fp8_compute = "w4a4";  // the CLI's --fp8-compute, checked before anything loads
  ASSERT_EQ(magi2_engine_create(&o, &e), MAGI2_ERR_INVALID);
  EXPECT_NE(std::string(magi2_last_error()).find("--fp8-compute"), std::string::npos);
  o.fp8_compute = "w8a8";  // ignored with bf16 experts, valid everywhere
  o.offload = "sideways";  // the CLI's --offload, checked before anything loads
  ASSERT_EQ(magi2_engine_create(&o, &e), MAGI2_ERR_INVALID);
  EXPECT_NE(std::string(magi2_last_error()).find("--offload"), std::string::npos);
  o.offload = "layerwise";  // accepted on the CPU backend, where it streams nothing
  o.linear_compute = "int4";  // the CLI's --linear-compute, checked before anything loads
  ASSERT_EQ(magi2_engine_create(&o, &e), MAGI2_ERR_INVALID);
  EXPECT_NE(std::string(magi2_last_error()).find("--linear-compute"), std::string::npos);
  o.linear_compute = nullptr;  // unset: bf16
  o.cuda_attention = "fp32";  // ignored on the CPU backend, valid everywhere
  o.text_encoder_device = "cpu";  // the CPU backend, as the CLI's default "auto" on this CPU-only run
  ASSERT_EQ(magi2_engine_create(&o, &e), MAGI2_OK) << magi2_last_error();

  magi2_generate_params p;
  magi2_generate_params_init(&p);
  p.prompt = "a red fox";
  p.seconds = 0.2;
  p.width = p.height = 32;
  p.steps = 3;
  const std::string mp4 = dir + "/c.mp4";
  p.output_mp4 = mp4.c_str();
  Counts c;
  p.user = &c;
  p.on_progress = on_progress;
  p.should_cancel = should_cancel;
  p.preview_every = 1;
  p.on_preview = on_preview;
  magi2_result r;
  ASSERT_EQ(magi2_generate(e, &p, &r), MAGI2_OK) << magi2_last_error();
  EXPECT_EQ(c.progress, 3);
  EXPECT_EQ(c.last_step, 3);
  EXPECT_EQ(c.previews, 3);
  EXPECT_EQ(r.steps, 3);
  EXPECT_TRUE(std::filesystem::exists(mp4));
  CliRun cli2;
  cli2.rc = run_command("MAGI2_CACHE_DIR=" + cache + " " + magi2_binary() +
                            " generate --model builtin:tiny --prompt 'a red fox' --seconds 0.2 --width 32 --height 32"
                            " --num-inference-steps 3 --threads 1 -o " + dir + "/cli.mp4",
                        &cli2.out);
  ASSERT_EQ(cli2.rc, 0) << cli2.out;
  EXPECT_NE(cli2.out.find(std::string("video [1, 32, 32, 3] sha256 ") + r.video_sha256), std::string::npos) << cli2.out;
  EXPECT_NE(cli2.out.find(std::string("sha256 ") + r.audio_sha256), std::string::npos) << cli2.out;

  // Cancelled after the first step: nothing written.
  const std::string mp4_cancel = dir + "/cancelled.mp4";
  p.output_mp4 = mp4_cancel.c_str();
  c = {};
  c.cancel_after = 1;
  EXPECT_EQ(magi2_generate(e, &p, &r), MAGI2_ERR_CANCELLED);
  EXPECT_EQ(c.progress, 1);
  EXPECT_FALSE(std::filesystem::exists(mp4_cancel));

  // Bad input: a status and one message naming the problem.
  p.width = 40;  // even (MP4) but not a multiple of 16 (the latent grid)
  EXPECT_EQ(magi2_generate(e, &p, &r), MAGI2_ERR_INVALID);
  EXPECT_NE(std::string(magi2_last_error()).find("16"), std::string::npos) << magi2_last_error();
  // A blank prompt: refused by the engine's request check, before any step.
  p.width = 32;
  c = {};
  for (const char* blank : {"", " \t\n "}) {
    p.prompt = blank;
    EXPECT_EQ(magi2_generate(e, &p, &r), MAGI2_ERR_INVALID) << blank;
    EXPECT_NE(std::string(magi2_last_error()).find("prompt: the prompt is"), std::string::npos) << magi2_last_error();
  }
  EXPECT_EQ(c.progress, 0);
  EXPECT_FALSE(std::filesystem::exists(mp4_cancel));
  magi2_engine_free(e);
}

}  // namespace
}  // namespace magi2::test
