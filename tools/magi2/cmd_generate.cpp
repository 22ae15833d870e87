// `magi2 generate`: prompt (Qwen3.5 text encoder) [+ reference image (Wan2.2
// VAE encoder)] -> denoising loop -> latents -> TurboVAE + Oobleck decode ->
// MP4 / PNG frames / WAV with SHA-256 digests. Official CLI nouns
// (inference/pipeline/entry.py), including the --samples JSON batch; every
// option has a MAGI2_* environment mirror.
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <filesystem>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/error.h"
#include "io/mmap_file.h"
#include "io/safetensors.h"
#include "media/outputs.h"
#include "model_files.h"
#include "models/magi2_dit/dit.h"
#include "models/wan22_vae/encoder.h"
#include "models/wan22_vae/weights.h"
#include "pipeline/decode.h"
#include "pipeline/generate.h"
#include "pipeline/reference_image.h"
#include "samples.h"
#include "text_conditioning.h"
#include "tiny_model.h"

namespace magi2::cli {

namespace {

struct GenerateArgs {
  std::string model = "builtin:tiny", config, transformer;
  std::string prompt, prompt_file, image, samples, output;
  std::string resolution = "272p";
  double seconds = 10.0;
  int width = 0, height = 0;
  std::string seed = "42";
  int steps = -1;  ///< -1: the config's num_inference_steps
  bool deterministic = false, no_decode = false;
  std::string save_latents, text_features, noise, routing_override, metrics;
  std::string save_frames, save_audio, audio_format = "pcm16";
  int output_width = 0, output_height = 0;
  std::string text_encoder, negative_prompt;
  bool truncate = false;
  int threads = 0;
  CLI::Option* prompt_opt = nullptr;  // set by the parser: an empty --prompt '' still counts as given
};

Tensor need(const SafetensorsFile& f, const std::string& name, const char* flag) {
  if (!f.contains(name)) throw Error(str_cat(flag, " file '", f.path(), "' has no tensor '", name, "'"));
  return f.tensor(name);
}

// Progress: a redrawn bar on a terminal, one plain line per step otherwise.
bool report_step(const GenerateStep& s, double elapsed_ms) {
  const double eta_s = elapsed_ms / (s.step + 1) * (s.steps - s.step - 1) / 1000.0;
  if (::isatty(STDERR_FILENO)) {
    const int width = 30, done = (s.step + 1) * width / s.steps;
    std::fprintf(stderr, "\r[%.*s%*s] %d/%d  %.0f ms/step  ETA %.0f s ", done, "##############################",
                 width - done, "", s.step + 1, s.steps, s.ms, eta_s);
    if (s.step + 1 == s.steps) std::fprintf(stderr, "\n");
  } else {
    std::fprintf(stderr, "step %d/%d t=%lld %.1f ms eta %.1f s\n", s.step + 1, s.steps,
                 static_cast<long long>(s.timestep), s.ms, eta_s);
  }
  return true;
}

// What one generation needs besides the shared model: its prompt (or the
// --text-features file), seed and output paths.
struct Job {
  std::string what;  // "--prompt", "sample 2", ... (messages)
  std::string prompt;
  std::string image;  // I2VA reference image, empty for T2VA
  uint64_t seed = 0;
  std::string latents, metrics;  // empty: not written
  OutputPlan outputs;            // decoded outputs (MP4, frames, WAV)
};

// The per-sample variant of an output plan: every path gets _sample_NNN.
OutputPlan plan_for_sample(const OutputPlan& p, size_t i) {
  OutputPlan q = p;
  if (!q.mp4_path.empty()) q.mp4_path = sample_output_path(q.mp4_path, i);
  if (!q.frames_dir.empty()) q.frames_dir = sample_output_path(q.frames_dir, i);
  if (!q.wav_path.empty()) q.wav_path = sample_output_path(q.wav_path, i);
  return q;
}

bool wants_decode(const OutputPlan& p) { return !p.mp4_path.empty() || !p.frames_dir.empty() || !p.wav_path.empty(); }

int run_generate(const GenerateArgs& a) {
  using clock = std::chrono::steady_clock;
  const auto t_start = clock::now();
  auto ms_since = [](clock::time_point t) {
    return std::chrono::duration<double, std::milli>(clock::now() - t).count();
  };
  // Flag validation first: nothing is loaded for an impossible request.
  const bool has_prompt = (a.prompt_opt && a.prompt_opt->count() > 0) || !a.prompt.empty();
  const int sources = has_prompt + !a.prompt_file.empty() + !a.samples.empty() + !a.text_features.empty();
  MAGI2_CHECK(sources >= 1, "nothing to generate: give --prompt, --prompt-file, --samples or --text-features");
  MAGI2_CHECK(sources == 1, "give only one of --prompt, --prompt-file, --samples and --text-features");
  MAGI2_CHECK(a.resolution == "272p" || a.resolution == "540p", "--resolution must be 272p or 540p, got '",
              a.resolution, "'");
  MAGI2_CHECK((a.width == 0) == (a.height == 0), "--width and --height go together");
  MAGI2_CHECK(a.steps == -1 || a.steps >= 1, "--num-inference-steps must be >= 1, got ", a.steps);
  MAGI2_CHECK(a.threads >= 0, "--threads must be >= 0, got ", a.threads);
  uint64_t seed = 0;
  {
    const char* b = a.seed.data();
    const auto [end, ec] = std::from_chars(b, b + a.seed.size(), seed);
    MAGI2_CHECK(ec == std::errc() && end == b + a.seed.size(), "--seed must be an integer in [0, 2^64), got '",
                a.seed, "'");
  }
  const int64_t w = a.width ? a.width : (a.resolution == "272p" ? 448 : 896);
  const int64_t h = a.height ? a.height : (a.resolution == "272p" ? 256 : 512);
  // -o names the clip (.mp4) or, for a latents-only run, the final latents (.safetensors).
  const bool out_mp4 = a.output.ends_with(".mp4"), out_latents = a.output.ends_with(".safetensors");
  MAGI2_CHECK(a.output.empty() || out_mp4 || out_latents, "-o ", a.output,
              ": expected FILE.mp4 (the clip) or FILE.safetensors (the final latents)");
  OutputPlan outputs;
  outputs.mp4_path = out_mp4 ? a.output : std::string();
  outputs.frames_dir = a.save_frames;
  outputs.wav_path = a.save_audio;
  outputs.wav_format = parse_wav_format(a.audio_format);
  outputs.output_width = a.output_width;
  outputs.output_height = a.output_height;
  const bool decode = wants_decode(outputs);
  const std::string latents_out = !a.save_latents.empty() ? a.save_latents : (out_latents ? a.output : "");
  MAGI2_CHECK(decode || !latents_out.empty(),
              "no output: give -o FILE.mp4, --save-frames DIR, --save-audio FILE.wav or --save-latents FILE");
  MAGI2_CHECK(!(a.no_decode && decode), "--no-decode stops at the latents, so it cannot go with -o FILE.mp4, "
              "--save-frames or --save-audio");
  MAGI2_CHECK(decode || (a.output_width == 0 && a.output_height == 0),
              "--output-width/--output-height resize decoded frames: give -o FILE.mp4 or --save-frames too");
  if (decode) check_output_plan(outputs, w, h);
  check_output_path(latents_out, a.save_latents.empty() ? "-o" : "--save-latents");
  check_output_path(a.metrics, "--metrics");
  if (!a.image.empty())
    MAGI2_CHECK(std::filesystem::is_regular_file(a.image), "--image ", a.image,
                std::filesystem::is_directory(a.image) ? ": is a folder, not an image file" : ": no such file");

  // The jobs: one, or one per sample (official seed + index, numbered outputs).
  std::vector<Job> jobs;
  if (!a.samples.empty()) {
    const std::vector<Sample> samples = load_samples(a.samples);
    for (size_t i = 0; i < samples.size(); ++i) {
      const std::string image = samples[i].image.empty() ? a.image : samples[i].image;
      if (!image.empty())
        MAGI2_CHECK(std::filesystem::is_regular_file(image), "--samples ", a.samples, ": sample ", i, " image ",
                    image, ": no such file");
      jobs.push_back({str_cat("sample ", i), samples[i].prompt, image, seed + i,
                      latents_out.empty() ? std::string() : sample_output_path(latents_out, i),
                      a.metrics.empty() ? std::string() : sample_output_path(a.metrics, i),
                      plan_for_sample(outputs, i)});
    }
  } else {
    const std::string prompt = has_prompt                  ? a.prompt
                               : !a.prompt_file.empty()    ? read_prompt_file(a.prompt_file)
                                                           : std::string();  // --text-features
    jobs.push_back({has_prompt ? "--prompt" : str_cat("--prompt-file ", a.prompt_file), prompt, a.image, seed,
                    latents_out, a.metrics, outputs});
  }

  const std::string root = resolve_model(a.model);
  MAGI2_CHECK(std::filesystem::is_directory(root), "model folder '", root, "' does not exist");
  const std::string wan_pth = (std::filesystem::path(root) / "vae" / "Wan2.2_VAE.pth").string();
  for (const Job& job : jobs)
    MAGI2_CHECK(job.image.empty() || std::filesystem::is_regular_file(wan_pth),
                "--image needs the Wan2.2 VAE: model folder '", root, "' has no vae/Wan2.2_VAE.pth");
  const bool encode = a.text_features.empty();
  const std::string te_dir = encode ? find_text_encoder_dir(root, a.text_encoder) : std::string();
  LoadedDit model = load_dit(root, a.transformer, a.config);
  const Magi2Config& cfg = model.config;
  auto be = make_cpu_backend(a.threads);

  // Unconditional branch (official get_null_feature): the negative prompt's
  // features when use_negative_prompt, else an empty feature; shared by all jobs.
  std::unique_ptr<qwen35::TextEncoder> enc;
  Tensor uncond, fixed_cond, fixed_special;
  double text_ms = 0;
  if (encode) {
    const auto t_text = clock::now();
    enc = qwen35::TextEncoder::load(te_dir, *be);
    MAGI2_CHECK(enc->config().hidden_size == cfg.arch.text_in_channels, "text encoder '", te_dir,
                "' gives features of width ", enc->config().hidden_size, " but the DiT takes text_in_channels = ",
                cfg.arch.text_in_channels);
    if (cfg.eval.use_negative_prompt)
      uncond = encode_prompt(*enc, negative_prompt_or_default(a.negative_prompt), false, a.truncate,
                             "negative prompt").features;
    else
      uncond = Tensor::zeros({0, cfg.arch.text_in_channels}, DType::BF16);
    text_ms = ms_since(t_text);
  } else {
    auto tf = SafetensorsFile::open(a.text_features);
    fixed_cond = need(*tf, "raw_txt_feat", "--text-features");
    uncond = need(*tf, "raw_null_txt_feat", "--text-features");
    // encode-text --i2v writes the <Figure 1> token next to the features.
    if (tf->contains("special_token")) fixed_special = tf->tensor("special_token");
  }
  const double load_ms = ms_since(t_start) - text_ms;
  Dit dit(cfg.arch, model.weights, *be);
  // Decoders are loaded before the first step, so a bad decoder checkpoint
  // costs no denoising time.
  const auto t_dec = clock::now();
  std::optional<ClipDecoders> decoders;
  if (decode) decoders.emplace(ClipDecoders::load(root, *be));
  const double decoder_load_ms = ms_since(t_dec);

  // Every prompt is encoded before the first denoising step, so a bad sample
  // fails the batch before any work on the others.
  // I2VA prompts get the <Figure 1> augmentation and yield the special token.
  std::vector<Tensor> conds(jobs.size()), specials(jobs.size());
  std::vector<double> prompt_ms(jobs.size(), 0.0);
  for (size_t j = 0; j < jobs.size(); ++j) {
    const auto t_p = clock::now();
    const bool i2v = !jobs[j].image.empty();
    if (encode) {
      qwen35::TextFeatures f = encode_prompt(*enc, jobs[j].prompt, i2v, a.truncate, jobs[j].what);
      conds[j] = f.features;
      if (i2v) specials[j] = f.special_token;
    } else {
      MAGI2_CHECK(!i2v || fixed_special.defined(), "--text-features ", a.text_features,
                  " has no 'special_token' for --image (write it with encode-text --i2v)");
      conds[j] = fixed_cond;
      if (i2v) specials[j] = fixed_special;
    }
    prompt_ms[j] = ms_since(t_p);
  }
  enc.reset();  // unmaps the text encoder weights before the denoising loop (the official code offloads it)

  // The Wan2.2 VAE encoder, only when some job has a reference image.
  std::unique_ptr<Wan22EncoderWeights> wan_w;
  std::unique_ptr<Wan22Encoder> wan;
  for (const Job& job : jobs)
    if (!job.image.empty() && !wan) {
      wan_w = std::make_unique<Wan22EncoderWeights>(Wan22EncoderWeights::load(wan_pth));
      wan = std::make_unique<Wan22Encoder>(*wan_w, *be);
    }

  for (size_t j = 0; j < jobs.size(); ++j) {
    const Job& job = jobs[j];
    const auto t_job = clock::now();
    if (jobs.size() > 1) std::fprintf(stderr, "magi2: sample %zu/%zu\n", j + 1, jobs.size());
    GenerateRequest req;
    req.latent = latent_shape_for_clip(a.seconds, w, h, cfg.eval.fps);
    req.latent.channels = cfg.arch.video_in_channels;
    req.latent.audio_channels = cfg.arch.audio_in_channels;
    req.text_cond = conds[j];
    const int64_t tokens = encode ? conds[j].size(0) : 0;
    req.text_uncond = uncond;
    double image_ms = 0;
    if (!job.image.empty()) {
      const auto t_img = clock::now();
      // The official engine encodes at the latent grid times 16 (spec pipeline §1.3).
      req.ref_image_latent = encode_reference_image(job.image, req.latent.width * 16, req.latent.height * 16, *wan);
      req.ref_special_token = specials[j];
      image_ms = ms_since(t_img);
    }
    req.num_steps = a.steps == -1 ? cfg.eval.num_inference_steps : a.steps;
    req.shift = cfg.eval.shift;
    req.seed = job.seed;
    req.cfg.video_txt_guidance_scale = cfg.eval.video_txt_guidance_scale;
    req.cfg.audio_txt_guidance_scale = cfg.eval.audio_txt_guidance_scale;
    req.cfg.use_cfg_trick = cfg.eval.use_cfg_trick;
    req.cfg.use_dynamic_cfg = cfg.eval.use_dynamic_cfg;
    req.cfg.use_skimmed_cfg_linear = cfg.eval.use_skimmed_cfg_linear;
    req.cfg.cfg_rescale = cfg.eval.cfg_rescale;
    if (!a.noise.empty()) {
      auto nf = SafetensorsFile::open(a.noise);
      req.init_latent = need(*nf, "loop_init_latent", "--noise");
      req.init_audio_latent = need(*nf, "loop_init_audio_latent", "--noise");
    }
    if (!a.routing_override.empty()) {
      auto rf = SafetensorsFile::open(a.routing_override);
      req.routing_override.resize(cfg.arch.num_layers);
      for (int l : cfg.arch.moe_layers)
        req.routing_override[l] = need(*rf, "loop_l" + std::to_string(l) + "_moe_topk_idx", "--routing-override");
    }
    const auto t_loop = clock::now();
    req.on_step = [&](GenerateStep& s) { return report_step(s, ms_since(t_loop)); };
    const std::string noise = a.noise.empty() ? str_cat("seed ", job.seed) : str_cat("noise from ", a.noise);
    std::string text = encode ? str_cat(tokens, " prompt tokens") : str_cat("features from ", a.text_features);
    if (!job.image.empty())
      text += str_cat(", reference image ", job.image, " (", req.ref_image_latent.size(2), "x",
                      req.ref_image_latent.size(3), " latent)");
    std::fprintf(stderr,
                 "magi2: %s, %lld x %lld px, %.2f s -> latent %lldx%lldx%lld + %lld audio frames, %d step%s, %s, %s\n",
                 model.transformer_dir.c_str(), (long long)w, (long long)h, a.seconds, (long long)req.latent.frames,
                 (long long)req.latent.height, (long long)req.latent.width, (long long)req.latent.audio_frames,
                 req.num_steps, req.num_steps == 1 ? "" : "s", text.c_str(), noise.c_str());
    GenerateResult r = generate_latents(dit, req);
    const double loop_ms = ms_since(t_loop);

    if (!job.latents.empty()) {
      write_safetensors(job.latents, {{"final_latent", r.latent}, {"final_audio_latent", r.audio_latent}});
      std::printf("wrote %s (final_latent %s, final_audio_latent %s)\n", job.latents.c_str(),
                  shape_str(r.latent.shape()).c_str(), shape_str(r.audio_latent.shape()).c_str());
    }
    DecodeTimes dt;
    OutputReport rep;
    double out_ms = 0;
    if (wants_decode(job.outputs)) {
      const Clip clip = decoders->decode(r.latent, r.audio_latent, &dt);
      const auto t_out = clock::now();
      rep = write_outputs(clip, job.outputs);
      out_ms = ms_since(t_out);
      for (const std::string& f : {job.outputs.mp4_path, job.outputs.frames_dir, job.outputs.wav_path})
        if (!f.empty()) std::printf("wrote %s\n", f.c_str());
      std::printf("video %s sha256 %s\naudio %s sha256 %s\n", shape_str(rep.video_shape).c_str(),
                  rep.hashes.video.c_str(), shape_str(rep.audio_shape).c_str(), rep.hashes.audio.c_str());
    }
    if (!job.metrics.empty()) {
      struct rusage ru {};
      ::getrusage(RUSAGE_SELF, &ru);
      nlohmann::json m = {{"backend", be->name()},
                          {"tokens_per_forward", r.tokens},
                          {"prompt_tokens", tokens},
                          {"steps", r.step_ms.size()},
                          {"step_ms", r.step_ms},
                          {"phase_ms",
                           {{"load", load_ms},
                            {"text_encoder_load_and_negative", text_ms},
                            {"prompt", prompt_ms[j]},
                            {"reference_image", image_ms},
                            {"denoise", loop_ms},
                            {"decoder_load", j == 0 ? decoder_load_ms : 0.0},
                            {"decode_video", dt.video_ms},
                            {"decode_audio", dt.audio_ms},
                            {"outputs", out_ms},
                            {"total", j == 0 ? ms_since(t_start) : ms_since(t_job)}}},
                          {"peak_rss_bytes", static_cast<int64_t>(ru.ru_maxrss) * 1024},
                          {"seed", job.seed},
                          {"latents", job.latents.empty() ? nlohmann::json() : nlohmann::json(job.latents)}};
      if (wants_decode(job.outputs)) m["outputs"] = rep.to_json(job.outputs);
      write_file_atomic(job.metrics, m.dump(2) + "\n");
    }
  }
  return 0;
}

}  // namespace

Command generate_command() {
  auto args = std::make_shared<GenerateArgs>();
  Command c;
  c.add_fn = [args](CLI::App& app) {
    CLI::App* s = app.add_subcommand("generate", "generate a clip (MP4 with sound) from a prompt, optionally with a reference image");
    GenerateArgs& a = *args;
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
    s->add_option("--resolution", a.resolution, "272p (448x256) or 540p (896x512)")->envname("MAGI2_RESOLUTION")
        ->capture_default_str();
    s->add_option("--seconds", a.seconds, "clip length in seconds")->envname("MAGI2_SECONDS")->capture_default_str();
    s->add_option("--width", a.width, "video width in pixels (multiple of 16; overrides --resolution)")
        ->envname("MAGI2_WIDTH");
    s->add_option("--height", a.height, "video height in pixels (multiple of 16)")->envname("MAGI2_HEIGHT");
    s->add_option("--seed", a.seed, "noise seed")->envname("MAGI2_SEED")->capture_default_str();
    s->add_option("--num-inference-steps", a.steps, "denoising steps (default: the config's, 100)")
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
    s->add_option("--threads", a.threads, "CPU threads (0: all)")->envname("MAGI2_THREADS");
    return s;
  };
  c.run = [args]() { return run_generate(*args); };
  return c;
}

}  // namespace magi2::cli
