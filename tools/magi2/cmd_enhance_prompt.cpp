// `magi2 enhance-prompt`: a short prompt (+ a reference image for I2V) ->
// the structured caption an OpenAI-compatible chat endpoint writes for it ->
// the Markdown the text encoder receives (official enhancer.py, pe_markdown.py).
// `--caption-json FILE --task t2v|i2v` renders a caption without any endpoint.
// Output: -o FILE (atomic) or stdout; one report line (stdout with -o, else
// stderr); --metrics FILE the prompt_enhancement entry.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "commands.h"
#include "core/error.h"
#include "io/mmap_file.h"
#include "engine/model_files.h"
#include "pe_options.h"
#include "prompt_enhance/caption_markdown.h"
#include "engine/text_conditioning.h"

namespace magi2::cli {

namespace {

struct EnhancePromptArgs {
  std::string prompt, prompt_file, image, caption_json, task, output, metrics;
  PeArgs pe;
  CLI::Option* prompt_opt = nullptr;  // an empty --prompt '' still counts as given
};

// Renders a caption file offline: same checks as an endpoint's answer.
std::string render_caption_file(const std::string& path, pe::Task task) {
  std::error_code ec;
  MAGI2_CHECK(std::filesystem::is_regular_file(path, ec), "--caption-json '", path, "': no such file");
  const std::string what = str_cat("--caption-json '", path, "'");
  const std::string text = read_text_file(path);
  std::string err;
  const std::optional<pe::PyJson> caption = qwen35::py_json_loads(text, &err);
  MAGI2_CHECK(caption.has_value(), what, " is not valid JSON: ", plain_json_message(err));
  pe::check_caption(*caption, task, what);
  return pe::render_caption_markdown(*caption);
}

int run_enhance_prompt(const EnhancePromptArgs& a) {
  const bool has_prompt = (a.prompt_opt && a.prompt_opt->count() > 0) || !a.prompt.empty();
  if (!a.output.empty()) check_output_path(a.output, "-o");
  if (!a.metrics.empty()) check_output_path(a.metrics, "--metrics");
  std::string markdown, report;
  nlohmann::json metrics;
  if (!a.caption_json.empty()) {
    MAGI2_CHECK(!has_prompt && a.prompt_file.empty() && a.image.empty(),
                "--caption-json renders a caption offline: it takes no --prompt, --prompt-file or --image");
    MAGI2_CHECK(!a.task.empty(), "--caption-json needs --task t2v|i2v");
    const pe::Task task = pe::parse_task(a.task, "--task");
    markdown = render_caption_file(a.caption_json, task);
    report = str_cat("prompt enhancement: rendered the ", pe::task_spec(task).name, " caption ", a.caption_json,
                     " offline (", markdown.size(), " bytes)");
    metrics = {{"task", pe::task_spec(task).name}, {"caption_json", a.caption_json}, {"endpoint", nullptr}};
  } else {
    MAGI2_CHECK(has_prompt != !a.prompt_file.empty(), "give exactly one of --prompt and --prompt-file");
    if (!a.task.empty()) {
      const pe::Task task = pe::parse_task(a.task, "--task");
      MAGI2_CHECK((task == pe::Task::kI2V) == !a.image.empty(),
                  task == pe::Task::kI2V ? "--task i2v needs --image" : "--task t2v takes no --image");
    }
    const std::string prompt = has_prompt ? a.prompt : read_prompt_file(a.prompt_file);
    // Nothing to rewrite: no request is sent.
    require_prompt(prompt, has_prompt ? "--prompt" : str_cat("--prompt-file ", a.prompt_file));
    const pe::Endpoint ep = pe_endpoint(a.pe);
    const pe::EnhanceRequest req = pe_request(a.pe, prompt, a.image);
    const pe::EnhanceResult r = run_prompt_enhancement(ep, req);
    markdown = r.markdown;
    report = pe::report_line(ep, req, r);
    metrics = pe::metrics_json(ep, req, r);
  }
  if (!a.output.empty()) write_file_atomic(a.output, markdown);
  if (!a.metrics.empty()) write_file_atomic(a.metrics, nlohmann::json{{"prompt_enhancement", metrics}}.dump(2) + "\n");
  if (a.output.empty()) {
    std::fwrite(markdown.data(), 1, markdown.size(), stdout);
    std::fprintf(stderr, "%s\n", report.c_str());
  } else {
    std::printf("%s -> %s\n", report.c_str(), a.output.c_str());
  }
  return 0;
}

}  // namespace

Command enhance_prompt_command() {
  return make_command<EnhancePromptArgs>([](CLI::App& app, EnhancePromptArgs& a) {
    CLI::App* s = app.add_subcommand(
        "enhance-prompt", "short prompt -> structured caption (OpenAI-compatible endpoint) -> Markdown");
    a.prompt_opt = s->add_option("--prompt", a.prompt, "the prompt to enhance")->envname("MAGI2_PROMPT");
    s->add_option("--prompt-file", a.prompt_file, "file holding the prompt (whitespace-stripped)")
        ->envname("MAGI2_PROMPT_FILE");
    s->add_option("--image", a.image, "I2V: reference image (PNG/JPEG/WebP path or http(s)/data: URL)")
        ->envname("MAGI2_IMAGE");
    s->add_option("--caption-json", a.caption_json, "render this caption JSON offline (no endpoint; needs --task)")
        ->envname("MAGI2_CAPTION_JSON");
    s->add_option("--task", a.task, "t2v or i2v (default: i2v with --image, else t2v)")->envname("MAGI2_TASK");
    s->add_option("-o,--output", a.output, "write the enhanced prompt (Markdown) here, atomically (default: stdout)")
        ->envname("MAGI2_OUTPUT");
    s->add_option("--metrics", a.metrics, "write a metrics JSON (prompt_enhancement: ms, attempts, prompt lengths)")
        ->envname("MAGI2_METRICS");
    add_pe_options(s, a.pe);
    return s;
  }, run_enhance_prompt);
}

}  // namespace magi2::cli
