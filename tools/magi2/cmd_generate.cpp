// `magi2 generate`: the command-line front end of the engine (engine/engine.h).
// Official CLI nouns (inference/pipeline/entry.py), including the --samples
// JSON batch; every option has a MAGI2_* environment mirror. Flags become an
// EngineOptions and GenerateParams; the engine does the work.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "cache_env.h"
#include "choice_option.h"
#include "commands.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/memory_plan.h"
#include "engine/model_files.h"
#include "engine/params.h"
#include "engine/text_conditioning.h"
#include "io/mmap_file.h"
#include "pe_options.h"
#include "pipeline/device_select.h"
#include "samples.h"
#include "weights_option.h"

namespace magi2::cli {

namespace {

struct GenerateArgs {
  std::string model = "builtin:tiny", config, transformer;
  std::string prompt, prompt_file, image, samples, output;
  std::string resolution = "272p";
  double seconds = 10.0;
  int width = 0, height = 0;
  int refiner_width = 1920, refiner_height = 1088;
  int refiner_steps = -1;  ///< -1: the config's magi2_refiner_num_inference_steps
  std::string refiner_device = "auto";
  std::string text_encoder_device = "auto";
  std::string decoder_device = "auto";
  std::string latents;     ///< `magi2 refine --latents`: saved preview latents
  std::string seed = "42";
  int steps = -1;  ///< -1: the config's num_inference_steps
  bool deterministic = false, no_decode = false;
  std::string save_latents, text_features, noise, routing_override, metrics;
  std::string save_frames, save_audio, audio_format = "pcm16";
  int output_width = 0, output_height = 0;
  std::string text_encoder, negative_prompt;
  bool truncate = false;
  int threads = 0;
  std::string device = "auto", weights = "auto", router_bias = "ema", cuda_attention = "auto";
  int64_t moe_max_rows = CudaOptions::kDefaultMoeMaxRows;  ///< --moe-max-rows
  std::string fp8_compute = "w8a16", attention_compute = "bf16", linear_compute = "bf16";
  std::string offload = "none";
  bool enhance_prompt = false;
  std::string save_prompt;
  bool dry_run = false, quiet = false;
  std::string max_device_memory;
  PeArgs pe;
  CLI::Option* prompt_opt = nullptr;  // set by the parser: an empty --prompt '' still counts as given
};

// Progress: a redrawn bar on a terminal, one plain line per step otherwise.
void report_step(const Progress& s) {
  if (::isatty(STDERR_FILENO)) {
    const int width = 30, done = s.step * width / s.steps;
    std::fprintf(stderr, "\r[%.*s%*s] %d/%d  %.0f ms/step  ETA %.0f s ", done, "##############################",
                 width - done, "", s.step, s.steps, s.step_ms, s.eta_s);
    if (s.step == s.steps) std::fprintf(stderr, "\n");
  } else {
    std::fprintf(stderr, "step %d/%d t=%lld %.1f ms eta %.1f s\n", s.step, s.steps,
                 static_cast<long long>(s.timestep), s.step_ms, s.eta_s);
  }
}

// Weight loading: a redrawn bar with the rate on a terminal; nothing otherwise
// (the metrics' phase_ms.load has the time).
LoadProgress load_bar() {
  if (!::isatty(STDERR_FILENO)) return {};
  auto t0 = std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
  return [t0](const std::string& stage, uint64_t done, uint64_t total) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - *t0).count();
    const int width = 30, bar = total ? static_cast<int>(done * width / total) : width;
    std::fprintf(stderr, "\rloading %s [%.*s%*s] %.1f/%.1f GB  %.1f GB/s ", stage.c_str(), bar,
                 "##############################", width - bar, "", done / 1e9, total / 1e9,
                 s > 0 ? done / 1e9 / s : 0.0);
    if (done == total) std::fprintf(stderr, "\n");
  };
}

// The per-sample variant of an output plan: every path gets _sample_NNN.
OutputPlan plan_for_sample(const OutputPlan& p, size_t i) {
  OutputPlan q = p;
  if (!q.mp4_path.empty()) q.mp4_path = sample_output_path(q.mp4_path, i);
  if (!q.frames_dir.empty()) q.frames_dir = sample_output_path(q.frames_dir, i);
  if (!q.wav_path.empty()) q.wav_path = sample_output_path(q.wav_path, i);
  return q;
}

// Plans every job against the budget (--max-device-memory, else the device's
// free memory or the host's RAM) and returns the largest. --dry-run: prints
// it (and writes it to --metrics) and returns nothing; otherwise an Error
// with the advice line when a plan does not fit, or with the first thing the
// DiT's backend cannot run (MemoryPlan::problems).
std::optional<MemoryPlan> check_memory_plans(const EngineOptions& ec, const std::vector<GenerateParams>& jobs,
                                             bool dry_run, const std::string& metrics) {
  const std::string backend = backend_name_for(ec.device, dry_run);
  std::string source = "--max-device-memory";
  const uint64_t budget = ec.max_device_memory ? ec.max_device_memory : default_memory_budget(backend, &source);
  MemoryPlanner planner(ec, backend);
  std::optional<MemoryPlan> worst;
  for (const GenerateParams& p : jobs) {
    MemoryPlan m = planner.plan(p, budget, source, jobs.size() > 1);
    if (!worst || m.peak_in_budget_pool() > worst->peak_in_budget_pool()) worst = std::move(m);
  }
  if (dry_run) {
    std::printf("%s", worst->text().c_str());
    if (jobs.size() > 1) std::printf("  (the largest of %zu samples; each is checked)\n", jobs.size());
    if (!metrics.empty()) {
      nlohmann::json m = {{"dry_run", true}, {"samples", jobs.size()}, {"memory_plan", worst->json()}};
      m.update(worst->fp8.json());  // as a run's metrics: weights, fp8_compute, attention_compute, linear_compute
      write_file_atomic(metrics, m.dump(2) + "\n");
    }
    return std::nullopt;
  }
  MAGI2_CHECK(worst->fits, worst->advice);
  MAGI2_CHECK(worst->problems.empty(), worst->problems.front());
  return worst;
}

// Flags -> engine config and one request per job (one, or one per sample:
// official seed + index, numbered outputs), then the engine does the work.
int run_generate(const GenerateArgs& a) {
  // Flag validation first: nothing is loaded for an impossible request.
  const bool has_prompt = (a.prompt_opt && a.prompt_opt->count() > 0) || !a.prompt.empty();
  const int sources = has_prompt + !a.prompt_file.empty() + !a.samples.empty() + !a.text_features.empty();
  MAGI2_CHECK(sources >= 1, "nothing to generate: give --prompt, --prompt-file, --samples or --text-features");
  MAGI2_CHECK(sources == 1, "give only one of --prompt, --prompt-file, --samples and --text-features");
  EngineOptions ec;
  ec.model = a.model;
  ec.cache = cache_env();
  ec.config = a.config;
  ec.transformer = a.transformer;
  ec.text_encoder = a.text_encoder;
  ec.encodes_text = a.text_features.empty();
  ec.threads = a.threads;
  ec.device = a.device;
  ec.refiner_device = a.refiner_device;
  ec.text_encoder_device = a.text_encoder_device;
  ec.decoder_device = a.decoder_device;
  if (!a.max_device_memory.empty()) ec.max_device_memory = parse_byte_size(a.max_device_memory, "--max-device-memory");
  ec.weights = a.weights;
  ec.router_bias = a.router_bias;
  ec.cuda.attention = a.cuda_attention;
  ec.cuda.moe_max_rows = a.moe_max_rows;
  ec.fp8_compute = a.fp8_compute;
  ec.attention_compute = a.attention_compute;
  ec.linear_compute = a.linear_compute;
  ec.offload = a.offload;
  if (a.enhance_prompt) {
    ec.prompt_enhancement = pe_endpoint(a.pe);
    ec.prompt_enhancement_request = pe_request(a.pe, "", "");
  }
  GenerateParams base;
  base.text_features = a.text_features;
  base.negative_prompt = a.negative_prompt;
  base.truncate = a.truncate;
  base.image = a.image;
  base.resolution = a.resolution;
  base.width = a.width;
  base.height = a.height;
  base.seconds = a.seconds;
  base.steps = a.steps;
  base.refiner_width = a.refiner_width;
  base.refiner_height = a.refiner_height;
  base.refiner_steps = a.refiner_steps;
  base.refine_from = a.latents;
  base.noise = a.noise;
  base.routing_override = a.routing_override;
  base.metrics_path = a.metrics;
  base.enhance_prompt = a.enhance_prompt;
  base.save_prompt_path = a.save_prompt;
  {
    const char* b = a.seed.data();
    const auto [end, ec_] = std::from_chars(b, b + a.seed.size(), base.seed);
    MAGI2_CHECK(ec_ == std::errc() && end == b + a.seed.size(), "--seed must be an integer in [0, 2^64), got '",
                a.seed, "'");
  }
  // -o names the clip (.mp4) or, for a latents-only run, the final latents (.safetensors).
  const bool out_mp4 = a.output.ends_with(".mp4"), out_latents = a.output.ends_with(".safetensors");
  MAGI2_CHECK(a.output.empty() || out_mp4 || out_latents, "-o ", a.output,
              ": expected FILE.mp4 (the clip) or FILE.safetensors (the final latents)");
  OutputPlan& outputs = base.outputs;
  outputs.mp4_path = out_mp4 ? a.output : std::string();
  outputs.frames_dir = a.save_frames;
  outputs.wav_path = a.save_audio;
  outputs.wav_format = parse_wav_format(a.audio_format);
  outputs.output_width = a.output_width;
  outputs.output_height = a.output_height;
  const bool decode = base.decodes();
  base.latents_path = !a.save_latents.empty() ? a.save_latents : (out_latents ? a.output : "");
  MAGI2_CHECK(decode || !base.latents_path.empty(),
              "no output: give -o FILE.mp4, --save-frames DIR, --save-audio FILE.wav or --save-latents FILE");
  MAGI2_CHECK(!(a.no_decode && decode), "--no-decode stops at the latents, so it cannot go with -o FILE.mp4, "
              "--save-frames or --save-audio");
  validate(ec);
  // validate(base) waits for the jobs: the prompt (checked there, before any
  // model work) comes from --prompt-file or --samples only below.
  check_output_path(base.latents_path, a.save_latents.empty() ? "-o" : "--save-latents");
  check_output_path(a.metrics, "--metrics");

  std::vector<GenerateParams> jobs;
  if (!a.samples.empty()) {
    const std::vector<Sample> samples = load_samples(a.samples);
    for (size_t i = 0; i < samples.size(); ++i) {
      GenerateParams p = base;
      p.label = str_cat("sample ", i);
      p.prompt = samples[i].prompt;
      if (!samples[i].image.empty()) p.image = samples[i].image;
      if (!p.image.empty())
        MAGI2_CHECK(file_problem(p.image).empty(), "--samples ", a.samples, ": sample ", i, " image ", p.image, ": ",
                    file_problem(p.image));
      p.seed = base.seed + i;
      if (!p.latents_path.empty()) p.latents_path = sample_output_path(base.latents_path, i);
      if (!p.metrics_path.empty()) p.metrics_path = sample_output_path(a.metrics, i);
      if (!p.save_prompt_path.empty()) p.save_prompt_path = sample_output_path(a.save_prompt, i);
      p.outputs = plan_for_sample(outputs, i);
      jobs.push_back(std::move(p));
    }
  } else {
    GenerateParams p = base;
    p.label = has_prompt ? "--prompt" : str_cat("--prompt-file ", a.prompt_file);
    p.prompt = has_prompt                  ? a.prompt
               : !a.prompt_file.empty()    ? read_prompt_file(a.prompt_file)
                                           : std::string();  // --text-features
    jobs.push_back(std::move(p));
  }

  // Every request is checked before any work (prompt, numbers, paths,
  // images), so an impossible sample fails the batch up front; prompts are then encoded one
  // sample at a time, just before its loop, so only one sample's features are
  // held and the first step starts after one encoding, not N.
  for (const GenerateParams& p : jobs) validate(p);
  // The memory plan of every request, from configs and headers alone: a run
  // that cannot fit stops here, before any weight is read.
  const std::optional<MemoryPlan> plan = check_memory_plans(ec, jobs, a.dry_run, a.metrics);
  if (!plan) return 0;
  Engine engine(ec, a.quiet ? LoadProgress() : load_bar());
  GenerateCallbacks cb;
  cb.on_log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  if (!a.quiet) cb.on_progress = report_step;
  // Sequential residency (the text encoder and the DiT do not fit together):
  // every prompt is encoded first, so each stage loads once.
  std::vector<PreparedRequest> ahead;
  if (plan->residency == Residency::Sequential && jobs.size() > 1) {
    for (const GenerateParams& p : jobs) ahead.push_back(engine.prepare(p));
    engine.release_text_encoder();
  }
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (jobs.size() > 1) std::fprintf(stderr, "magi2: sample %zu/%zu (%s)\n", j + 1, jobs.size(), jobs[j].label.c_str());
    const PreparedRequest prepared = ahead.empty() ? engine.prepare(jobs[j]) : std::move(ahead[j]);
    // The text encoder stays loaded while samples remain to encode; after the
    // last one it is unmapped before the loop (the official code offloads it).
    if (j + 1 == jobs.size()) engine.release_text_encoder();
    const GenerateParams& p = prepared.params;
    const GenerateOutcome o = engine.run(prepared, cb);
    if (!p.latents_path.empty())
      std::printf("wrote %s (final_latent %s, final_audio_latent %s)\n", p.latents_path.c_str(),
                  shape_str(o.latent_shape).c_str(), shape_str(o.audio_latent_shape).c_str());
    if (o.decoded) {
      for (const std::string& f : {p.outputs.mp4_path, p.outputs.frames_dir, p.outputs.wav_path})
        if (!f.empty()) std::printf("wrote %s\n", f.c_str());
      std::printf("video %s sha256 %s\naudio %s sha256 %s\n", shape_str(o.report.video_shape).c_str(),
                  o.report.hashes.video.c_str(), shape_str(o.report.audio_shape).c_str(),
                  o.report.hashes.audio.c_str());
    }
  }
  return 0;
}

// The options of `generate`, shared by `refine`.
void add_generate_options(CLI::App* s, GenerateArgs& a) {
    s->add_option("--model", a.model,
                  "model folder (official layout) or builtin:tiny (made on first use in $MAGI2_CACHE_DIR, "
                  "else $XDG_CACHE_HOME/magi2, else ~/.cache/magi2)")
        ->envname("MAGI2_MODEL")
        ->capture_default_str();
    s->add_option("--config", a.config, "config in the official JSON layout")->envname("MAGI2_CONFIG");
    s->add_option("--transformer", a.transformer, "DiT checkpoint folder (overrides MODEL/preview)")
        ->envname("MAGI2_TRANSFORMER");
    a.prompt_opt = s->add_option("--prompt", a.prompt, "text prompt (plain or the official enhanced JSON)")
                       ->envname("MAGI2_PROMPT");
    s->add_option("--prompt-file", a.prompt_file, "file holding the prompt (whitespace-stripped)")
        ->envname("MAGI2_PROMPT_FILE");
    s->add_option("--text-encoder", a.text_encoder, "Qwen3.5 text encoder folder (overrides MODEL/text_encoder)")
        ->envname("MAGI2_TEXT_ENCODER");
    s->add_option("--negative-prompt", a.negative_prompt,
                  "negative prompt of the unconditional branch (default: the official one)")
        ->envname("MAGI2_NEGATIVE_PROMPT");
    s->add_flag("--truncate", a.truncate, "cut prompts over 7000 tokens as the official encoder (else an error)")
        ->envname("MAGI2_TRUNCATE");
    s->add_option("--image", a.image, "reference image, PNG or JPEG (I2VA: image-to-video+audio)")->envname("MAGI2_IMAGE");
    s->add_option("--samples", a.samples,
                  "official JSON batch [{\"prompt\"|\"prompt_file\", \"image\"?}]: sample i uses seed + i and "
                  "writes the outputs with _sample_NNN before the extension")
        ->envname("MAGI2_SAMPLES");
    s->add_option("-o,--output", a.output, "the clip (FILE.mp4), or the final latents (FILE.safetensors)")->envname("MAGI2_OUTPUT");
    s->add_option("--resolution", a.resolution,
                  "272p (448x256), 540p (896x512) or 1080p (preview at 896x512, then the refiner to "
                  "--refiner-width x --refiner-height at 25 fps)")
        ->envname("MAGI2_RESOLUTION")
        ->capture_default_str();
    s->add_option("--refiner-width", a.refiner_width, "1080p: refined width in pixels (multiple of 16)")
        ->envname("MAGI2_REFINER_WIDTH")
        ->capture_default_str();
    s->add_option("--refiner-height", a.refiner_height, "1080p: refined height in pixels (multiple of 16)")
        ->envname("MAGI2_REFINER_HEIGHT")
        ->capture_default_str();
    s->add_option("--refiner-num-inference-steps", a.refiner_steps, "1080p: refiner steps, 1..1000 (default: the config's, 5)")
        ->check(CLI::Range(1, Limits::kMaxSteps))
        ->envname("MAGI2_REFINER_NUM_INFERENCE_STEPS");
    add_choice_option(s, "--refiner-device", a.refiner_device,
                      "1080p: where the refiner runs: auto (the DiT's --device, default; on CUDA the DiT is freed "
                      "before it uploads when both do not fit --max-device-memory) or cpu (the reference backend)",
                      {"auto", "cpu"}, "MAGI2_REFINER_DEVICE");
    s->add_option("--seconds", a.seconds, "clip length in seconds")->envname("MAGI2_SECONDS")->capture_default_str();
    s->add_option("--width", a.width, "video width in pixels (multiple of 16; overrides --resolution)")
        ->envname("MAGI2_WIDTH");
    s->add_option("--height", a.height, "video height in pixels (multiple of 16)")->envname("MAGI2_HEIGHT");
    s->add_option("--seed", a.seed, "noise seed")->envname("MAGI2_SEED")->capture_default_str();
    // Checked by CLI11 when given, so no value (not even the engine's internal
    // -1 for "the config's") gets past the flag's documented range.
    s->add_option("--num-inference-steps", a.steps, "denoising steps, 1..1000 (default: the config's, 100)")
        ->check(CLI::Range(1, Limits::kMaxSteps))
        ->envname("MAGI2_NUM_INFERENCE_STEPS");
    s->add_flag("--deterministic", a.deterministic, "deterministic kernels (always on for the CPU backend)")
        ->envname("MAGI2_DETERMINISTIC");
    s->add_flag("--no-decode", a.no_decode, "stop at the latents")->envname("MAGI2_NO_DECODE");
    s->add_option("--save-latents", a.save_latents, "write final_latent, final_audio_latent (safetensors)")
        ->envname("MAGI2_SAVE_LATENTS");
    s->add_option("--save-frames", a.save_frames, "write the decoded frames as DIR/frame_00000.png, ...")
        ->envname("MAGI2_SAVE_FRAMES");
    s->add_option("--save-audio", a.save_audio, "write the decoded 44.1 kHz stereo audio (WAV)")
        ->envname("MAGI2_SAVE_AUDIO");
    s->add_option("--audio-format", a.audio_format, "WAV sample format: pcm16 (official) or float32")
        ->envname("MAGI2_AUDIO_FORMAT")
        ->capture_default_str();
    s->add_option("--output-width", a.output_width, "resize the decoded frames to this width (with --output-height; 0: decoded size)")
        ->envname("MAGI2_OUTPUT_WIDTH");
    s->add_option("--output-height", a.output_height, "resize the decoded frames to this height")
        ->envname("MAGI2_OUTPUT_HEIGHT");
    s->add_option("--text-features", a.text_features,
                  "precomputed text features raw_txt_feat, raw_null_txt_feat (safetensors, e.g. from encode-text "
                  "--negative) instead of a prompt")
        ->envname("MAGI2_TEXT_FEATURES");
    s->add_option("--noise", a.noise, "initial noise loop_init_latent, loop_init_audio_latent (safetensors)")
        ->envname("MAGI2_NOISE");
    s->add_option("--routing-override", a.routing_override,
                  "testing: per-step expert selection loop_l{layer}_moe_topk_idx [steps,heads,N,k]")
        ->envname("MAGI2_ROUTING_OVERRIDE");
    s->add_option("--metrics", a.metrics, "write a metrics JSON (per-step ms, phases, peak memory)")
        ->envname("MAGI2_METRICS");
    s->add_option("--threads", a.threads, "CPU threads, 0..1024 (0: all)")
        ->check(CLI::Range(0, Limits::kMaxThreads))->envname("MAGI2_THREADS");
    s->add_option("--device", a.device, "where the DiT and the denoising loop run: auto (cuda when a GPU is "
                  "present), cuda or cpu")->envname("MAGI2_DEVICE")->capture_default_str();
    add_weights_option(s, a.weights);
    add_router_bias_option(s, a.router_bias);
    add_cuda_attention_option(s, a.cuda_attention);
    add_moe_max_rows_option(s, a.moe_max_rows);
    add_text_encoder_device_option(s, a.text_encoder_device);
    add_decoder_device_option(s, a.decoder_device);
    add_fp8_compute_option(s, a.fp8_compute);
    add_attention_compute_option(s, a.attention_compute);
    add_linear_compute_option(s, a.linear_compute);
    add_offload_option(s, a.offload);
    s->add_flag("--enhance-prompt", a.enhance_prompt,
                "rewrite the prompt into the structured caption through an OpenAI-compatible endpoint (--pe-*)")
        ->envname("MAGI2_ENHANCE_PROMPT");
    s->add_option("--save-prompt", a.save_prompt,
                  "write the prompt the text encoder receives (FILE.json: a --samples file that replays it exactly)")
        ->envname("MAGI2_SAVE_PROMPT");
    s->add_flag("--dry-run", a.dry_run,
                "print the memory plan (per stage weights, activations, workspace, residency, peak) and exit "
                "without loading weights (--metrics FILE: the plan as JSON)")
        ->envname("MAGI2_DRY_RUN");
    s->add_flag("--quiet", a.quiet, "no progress output (the weight-loading bar and the per-step lines)")
        ->envname("MAGI2_QUIET");
    s->add_option("--max-device-memory", a.max_device_memory,
                  "bytes the DiT's device may hold, e.g. 40GiB (default: the GPU's free memory, or the host's RAM "
                  "for --device cpu); a run whose plan does not fit stops before loading")
        ->envname("MAGI2_MAX_DEVICE_MEMORY");
    add_pe_options(s, a.pe);
}

}  // namespace

Command generate_command() {
  return make_command<GenerateArgs>([](CLI::App& app, GenerateArgs& a) {
    CLI::App* s = app.add_subcommand("generate", "generate a clip (MP4 with sound) from a prompt, optionally with a reference image");
    add_generate_options(s, a);
    return s;
  }, run_generate);
}

Command refine_command() {
  return make_command<GenerateArgs>([](CLI::App& app, GenerateArgs& a) {
    CLI::App* s = app.add_subcommand(
        "refine", "run the 1080p refiner on saved preview latents (generate --save-latents) and decode the clip");
    add_generate_options(s, a);
    s->add_option("--latents", a.latents, "preview latents final_latent, final_audio_latent (safetensors)")
        ->envname("MAGI2_LATENTS")
        ->required();
    return s;
  }, run_generate, [] {
    GenerateArgs a;
    a.resolution = "1080p";
    return a;
  }());
}

}  // namespace magi2::cli
