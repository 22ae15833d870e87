// `magi2 encode-text`: prompt -> Qwen3.5 text features (the official
// Qwen35TextEncoder path: normalise, tokenise, hidden_states[-3] in bf16),
// written as safetensors that `magi2 generate --text-features` reads.
// Output tensors:
//   raw_txt_feat       [1, L, D] bf16  features of the prompt
//   txt_input_ids      [L] i64         its token ids
//   raw_null_txt_feat  [1, Ln, D] bf16 features of the negative prompt (--negative)
//   null_txt_input_ids [Ln] i64
//   special_token      [1, D] bf16     I2VA `<Figure 1>` token (--i2v; zeros if no figure token)
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <utility>
#include <vector>

#include "cache_env.h"
#include "choice_option.h"
#include "commands.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "engine/model_files.h"
#include "engine/params.h"
#include "engine/text_conditioning.h"
#include "engine/tiny_model.h"
#include "pipeline/device_select.h"
#include "weights_option.h"

namespace magi2::cli {

namespace {

struct EncodeTextArgs {
  std::string model = "builtin:tiny", text_encoder, prompt, prompt_file, negative_prompt, output;
  std::string device = "auto", text_encoder_device = "auto";
  bool i2v = false, negative = false, truncate = false, fp32 = false;
  int threads = 0;
  CLI::Option* prompt_opt = nullptr;  // set by the parser: an empty --prompt '' still counts as given
};

Tensor ids_tensor(const std::vector<int64_t>& ids) {
  Tensor t = Tensor::empty({static_cast<int64_t>(ids.size())}, DType::I64);
  if (!ids.empty()) std::copy(ids.begin(), ids.end(), t.data_as<int64_t>());
  return t;
}

Tensor batched(const Tensor& f) { return f.reshape({1, f.size(0), f.size(1)}); }

int run_encode_text(const EncodeTextArgs& a) {
  const bool has_prompt = (a.prompt_opt && a.prompt_opt->count() > 0) || !a.prompt.empty();
  MAGI2_CHECK(has_prompt != !a.prompt_file.empty(), "give exactly one of --prompt and --prompt-file");
  MAGI2_CHECK(!a.output.empty(), "no output: give -o FILE.safetensors");
  MAGI2_CHECK(a.output.ends_with(".safetensors"), "-o ", a.output, ": the output is a .safetensors file");
  check_output_path(a.output, "-o");
  const std::string prompt = has_prompt ? a.prompt : read_prompt_file(a.prompt_file);
  const std::string what = a.prompt_file.empty() ? "--prompt" : str_cat("--prompt-file ", a.prompt_file);
  require_prompt(prompt, what);  // before the text encoder loads: a blank prompt has nothing to encode

  const auto t0 = std::chrono::steady_clock::now();
  const std::string dir = find_text_encoder_dir(a.text_encoder.empty() ? resolve_model(a.model, cache_env()) : "", a.text_encoder);
  // --text-encoder-device auto: the --device backend (CUDA with a GPU), else the CPU reference.
  auto be = a.text_encoder_device == "cpu" ? make_cpu_backend(a.threads) : make_backend_for(a.device, a.threads);
  auto enc = qwen35::TextEncoder::load(dir, *be, a.fp32 ? DType::F32 : DType::BF16);
  const qwen35::TextFeatures f = encode_prompt(*enc, prompt, a.i2v, a.truncate, what);
  std::vector<std::pair<std::string, Tensor>> out = {{"raw_txt_feat", batched(f.features)},
                                                     {"txt_input_ids", ids_tensor(f.prompt.encoding.ids)}};
  if (a.i2v) out.emplace_back("special_token", f.special_token);
  int64_t neg_len = 0;
  if (a.negative) {
    const qwen35::TextFeatures n =
        encode_prompt(*enc, negative_prompt_or_default(a.negative_prompt), false, a.truncate, "negative prompt");
    neg_len = n.features.size(0);
    out.emplace_back("raw_null_txt_feat", batched(n.features));
    out.emplace_back("null_txt_input_ids", ids_tensor(n.prompt.encoding.ids));
  }
  write_safetensors(a.output, out, {{"text_encoder", dir}});
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "encode-text: %lld tokens%s%s, %s, %.0f ms -> %s (raw_txt_feat %s%s)\n",
      static_cast<long long>(f.features.size(0)), a.negative ? str_cat(" + ", neg_len, " negative").c_str() : "",
      a.i2v ? str_cat(", ", f.prompt.figure_indices.size(), " figure tokens").c_str() : "", a.fp32 ? "fp32" : "bf16",
      ms, a.output.c_str(), shape_str(out[0].second.shape()).c_str(), a.negative ? ", raw_null_txt_feat" : "");
  return 0;
}

}  // namespace

Command encode_text_command() {
  return make_command<EncodeTextArgs>([](CLI::App& app, EncodeTextArgs& a) {
    CLI::App* s = app.add_subcommand("encode-text", "prompt -> Qwen3.5 text features (safetensors)");
    s->add_option("--model", a.model, "model folder (official layout, uses MODEL/text_encoder) or builtin:tiny")
        ->envname("MAGI2_MODEL")
        ->capture_default_str();
    s->add_option("--text-encoder", a.text_encoder, "text encoder folder (overrides MODEL/text_encoder)")
        ->envname("MAGI2_TEXT_ENCODER");
    a.prompt_opt = s->add_option("--prompt", a.prompt, "prompt text (plain or the official enhanced JSON)")
                       ->envname("MAGI2_PROMPT");
    s->add_option("--prompt-file", a.prompt_file, "file holding the prompt (whitespace-stripped)")
        ->envname("MAGI2_PROMPT_FILE");
    s->add_flag("--i2v", a.i2v, "image-to-video prompt: add the <Figure 1> reference and write special_token")
        ->envname("MAGI2_I2V");
    s->add_flag("--negative", a.negative, "also write the negative prompt's features (raw_null_txt_feat)")
        ->envname("MAGI2_NEGATIVE");
    s->add_option("--negative-prompt", a.negative_prompt, "negative prompt (default: the official one)")
        ->envname("MAGI2_NEGATIVE_PROMPT");
    s->add_flag("--truncate", a.truncate, "cut prompts over 7000 tokens as the official encoder (else an error)")
        ->envname("MAGI2_TRUNCATE");
    s->add_flag("--fp32", a.fp32, "fp32 reference mode (weights upcast; the official path is bf16)")
        ->envname("MAGI2_FP32");
    s->add_option("-o,--output", a.output,
                  "output .safetensors: raw_txt_feat [1,L,D] bf16, txt_input_ids [L]; with --negative "
                  "raw_null_txt_feat, null_txt_input_ids; with --i2v special_token [1,D]")
        ->envname("MAGI2_OUTPUT");
    s->add_option("--threads", a.threads, "CPU threads, 0..1024 (0: all)")
        ->check(CLI::Range(0, Limits::kMaxThreads))->envname("MAGI2_THREADS");
    add_choice_option(s, "--device", a.device,
                      "the backend --text-encoder-device auto picks: auto (cuda when a GPU is present), cuda or cpu",
                      {"auto", "cuda", "cpu"}, "MAGI2_DEVICE");
    add_text_encoder_device_option(s, a.text_encoder_device);
    return s;
  }, run_encode_text);
}

}  // namespace magi2::cli
