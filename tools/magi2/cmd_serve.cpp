// `magi2 serve`: the HTTP front end of the engine (src/server, docs/server.md).
// Loads the model once, then serves the OpenAI-style /v1/videos API until
// SIGTERM or SIGINT: new jobs are then refused, queued ones cancelled, the
// running one finishes (a second signal cancels it at its next step), and
// the process exits 0. Every option has a MAGI2_* environment mirror.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

#include <CLI/CLI.hpp>

#include "cache_env.h"
#include "commands.h"
#include "pe_options.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/memory_plan.h"
#include "server/server.h"
#include "weights_option.h"

namespace magi2::cli {

namespace {

// Ranges of the serve-only flags (the engine's own are in Limits).
constexpr size_t kMaxServeQueue = 10000;
constexpr size_t kMaxServeKeep = 100000;
constexpr size_t kMaxServeBodyMb = 4096;
constexpr int kMaxServeHttpThreads = 1024;

struct ServeArgs {
  EngineOptions engine;
  std::string max_device_memory;  ///< --max-device-memory, parsed into engine.max_device_memory
  server::ServerOptions server;
  std::string output_dir = "magi2-outputs";
  size_t max_body_mb = 32;
  bool cancel_on_stop = false;
  PeArgs pe;
};

int run_serve(ServeArgs& a) {
  a.engine.cache = cache_env();
  if (!a.max_device_memory.empty())
    a.engine.max_device_memory = parse_byte_size(a.max_device_memory, "--max-device-memory");
  a.server.queue.output_dir = a.output_dir;
  // Every count and size has a documented range (--help), checked before the
  // model is loaded: an unbounded one is a crash (10^8 HTTP threads) or a
  // limit that lets requests past the engine's own (Limits).
  const auto in_range = [](const char* flag, auto v, auto lo, auto hi) {
    MAGI2_CHECK(v >= lo && v <= hi, flag, " must be in [", lo, ", ", hi, "], got ", v);
  };
  in_range("--threads", a.engine.threads, 0, Limits::kMaxThreads);
  in_range("--port", a.server.port, 0, 65535);
  in_range("--max-queue", a.server.queue.max_queued, size_t{1}, kMaxServeQueue);
  in_range("--keep", a.server.queue.keep_finished, size_t{1}, kMaxServeKeep);
  in_range("--max-body-mb", a.max_body_mb, size_t{1}, kMaxServeBodyMb);
  in_range("--max-side", a.server.limits.max_side, int64_t{16}, Limits::kMaxSide);
  in_range("--max-steps", a.server.limits.max_steps, 1, Limits::kMaxSteps);
  in_range("--http-threads", a.server.http_threads, 2, kMaxServeHttpThreads);
  MAGI2_CHECK(a.server.limits.max_seconds > 0 && a.server.limits.max_seconds <= Limits::kMaxSeconds,
              "--max-seconds must be in (0, ", Limits::kMaxSeconds, "], got ", a.server.limits.max_seconds);
  a.server.max_body_bytes = a.max_body_mb << 20;
  // An endpoint (flag or $OPENAI_BASE_URL) lets requests ask for enhance_prompt: true.
  if (!a.pe.base_url.empty() || std::getenv("OPENAI_BASE_URL")) {
    a.engine.prompt_enhancement = pe_endpoint(a.pe);
    a.engine.prompt_enhancement_request = pe_request(a.pe, "", "");
    a.server.limits.prompt_enhancement = true;
  }
  // Signals go to one waiting thread, never to a handler interrupting the engine.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  Engine engine(a.engine);
  server::VideoServer srv(engine, a.server);
  std::printf("magi2 serve: %s on http://%s:%d (output folder %s)\n", engine.model_root().c_str(),
              a.server.host.c_str(), srv.port(), a.output_dir.c_str());
  std::fflush(stdout);
  std::atomic<bool> exiting{false};
  std::thread signals([&] {
    std::thread stopper;  // the first stop waits for the running job; a second signal must still get through
    for (int n = 0;; ++n) {
      int sig = 0;
      sigwait(&sigs, &sig);
      if (exiting) break;
      if (n == 0) {
        std::fprintf(stderr, "magi2 serve: signal %d: refusing new jobs, finishing the running one\n", sig);
        stopper = std::thread([&] { srv.stop(a.cancel_on_stop); });
      } else {
        std::fprintf(stderr, "magi2 serve: signal %d: cancelling the running job\n", sig);
        srv.stop(true);
      }
    }
    if (stopper.joinable()) stopper.join();
  });
  srv.serve();
  exiting = true;
  pthread_kill(signals.native_handle(), SIGTERM);  // wakes the signal thread's sigwait
  signals.join();
  std::fprintf(stderr, "magi2 serve: stopped\n");
  return 0;
}

}  // namespace

Command serve_command() {
  return make_command<ServeArgs>([](CLI::App& app, ServeArgs& a) {
    CLI::App* s = app.add_subcommand("serve", "serve an OpenAI-style /v1/videos HTTP API (jobs, events, cancel)");
    s->add_option("--model", a.engine.model, "model folder (official layout) or builtin:tiny")
        ->envname("MAGI2_MODEL")
        ->capture_default_str();
    s->add_option("--config", a.engine.config, "config in the official JSON layout")->envname("MAGI2_CONFIG");
    s->add_option("--transformer", a.engine.transformer, "DiT checkpoint folder (overrides MODEL/preview)")
        ->envname("MAGI2_TRANSFORMER");
    s->add_option("--text-encoder", a.engine.text_encoder, "Qwen3.5 text encoder folder (overrides MODEL/text_encoder)")
        ->envname("MAGI2_TEXT_ENCODER");
    s->add_option("--threads", a.engine.threads, "CPU threads, 0..1024 (0: all)")->envname("MAGI2_THREADS");
    s->add_option("--max-device-memory", a.max_device_memory,
                  "bytes the DiT's device may hold, e.g. 40GiB (default: the GPU's free memory, or the host's RAM "
                  "on the CPU); a request whose memory plan does not fit is refused before any work")
        ->envname("MAGI2_MAX_DEVICE_MEMORY");
    add_weights_option(s, a.engine.weights);
    add_router_bias_option(s, a.engine.router_bias);
    add_cuda_attention_option(s, a.engine.cuda.attention);
    add_moe_max_rows_option(s, a.engine.cuda.moe_max_rows);
    add_text_encoder_device_option(s, a.engine.text_encoder_device);
    add_decoder_device_option(s, a.engine.decoder_device);
    add_fp8_compute_option(s, a.engine.fp8_compute);
    add_attention_compute_option(s, a.engine.attention_compute);
    add_linear_compute_option(s, a.engine.linear_compute);
    add_offload_option(s, a.engine.offload);
    s->add_option("--host", a.server.host, "address to listen on")->envname("MAGI2_HOST")->capture_default_str();
    s->add_option("--port", a.server.port, "port to listen on, 0..65535 (0: any free one, printed at start)")
        ->envname("MAGI2_PORT")
        ->capture_default_str();
    s->add_option("--api-key", a.server.api_key, "require 'Authorization: Bearer KEY' (except /health)")
        ->envname("MAGI2_API_KEY");
    s->add_option("--output-dir", a.output_dir, "folder of the finished videos (ID.mp4, ID.png)")
        ->envname("MAGI2_OUTPUT_DIR")
        ->capture_default_str();
    s->add_option("--max-queue", a.server.queue.max_queued, "jobs waiting beyond the running one, 1..10000 (more: 429)")
        ->check(CLI::NonNegativeNumber)  // CLI11 would wrap "-1" into SIZE_MAX
        ->envname("MAGI2_MAX_QUEUE")
        ->capture_default_str();
    s->add_option("--keep", a.server.queue.keep_finished, "finished jobs kept with their files, 1..100000 (oldest dropped)")
        ->check(CLI::NonNegativeNumber)  // CLI11 would wrap "-1" into SIZE_MAX
        ->envname("MAGI2_KEEP")
        ->capture_default_str();
    s->add_option("--max-body-mb", a.max_body_mb, "largest request body in MiB, 1..4096 (more: 413)")
        ->check(CLI::NonNegativeNumber)  // CLI11 would wrap "-1" into SIZE_MAX
        ->envname("MAGI2_MAX_BODY_MB")
        ->capture_default_str();
    s->add_option("--max-seconds", a.server.limits.max_seconds, "longest clip a request may ask for, in seconds, (0, 60]")
        ->envname("MAGI2_MAX_SECONDS")
        ->capture_default_str();
    s->add_option("--max-side", a.server.limits.max_side, "largest width or height a request may ask for, 16..2048")
        ->envname("MAGI2_MAX_SIDE")
        ->capture_default_str();
    s->add_option("--max-steps", a.server.limits.max_steps, "most denoising steps a request may ask for, 1..1000")
        ->envname("MAGI2_MAX_STEPS")
        ->capture_default_str();
    s->add_option("--http-threads", a.server.http_threads, "connections served at once, 2..1024 (events and /sync hold one)")
        ->envname("MAGI2_HTTP_THREADS")
        ->capture_default_str();
    s->add_flag("--cancel-on-stop", a.cancel_on_stop, "on SIGTERM cancel the running job instead of finishing it")
        ->envname("MAGI2_CANCEL_ON_STOP");
    add_pe_options(s, a.pe);
    return s;
  }, run_serve);
}

}  // namespace magi2::cli
