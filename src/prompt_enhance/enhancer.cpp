#include "prompt_enhance/enhancer.h"

#include <openssl/evp.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/qwen35/tok_unicode.h"
#include "prompt_enhance/caption_markdown.h"
#include "io/json_depth.h"

namespace magi2::pe {

namespace {

constexpr uintmax_t kMaxImageBytes = 20u << 20;

std::string base64(const std::string& bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

// The first bytes of `s` for an error line (one line, UTF-8 boundary).
std::string head(std::string_view s, size_t max = 80) {
  std::string h(s.substr(0, std::min(max, s.size())));
  while (!h.empty() && (static_cast<unsigned char>(h.back()) & 0xC0) == 0x80) h.pop_back();
  if (!h.empty() && static_cast<unsigned char>(h.back()) >= 0xC0) h.pop_back();
  for (char& c : h)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  return h.size() < s.size() ? h + "..." : h;
}

}  // namespace

std::string image_url(const std::string& image, std::string_view flag) {
  if (image.starts_with("http://") || image.starts_with("https://") || image.starts_with("data:")) return image;
  namespace fs = std::filesystem;
  std::error_code ec;
  MAGI2_CHECK(fs::is_regular_file(image, ec), flag, " '", image, "': no such image file");
  const uintmax_t size = fs::file_size(image, ec);
  MAGI2_CHECK(!ec && size <= kMaxImageBytes, flag, " '", image, "': ", ec ? ec.message() : "larger than 20 MiB");
  std::ifstream f(image, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  MAGI2_CHECK(f.good() || f.eof(), flag, " '", image, "': cannot read the file");
  std::string ext = fs::path(image).extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const char* mime = ext == ".png" ? "image/png" : ext == ".webp" ? "image/webp" : "image/jpeg";
  return str_cat("data:", mime, ";base64,", base64(bytes));
}

std::string chat_request_body(const EnhanceRequest& req, Task task) {
  (void)qwen35::utf8_decode(req.prompt, "prompt");
  const std::string_view tmpl = req.template_text.empty() ? builtin_template(task) : req.template_text;
  (void)qwen35::utf8_decode(tmpl, "prompt enhancement template");
  const TaskSpec& spec = task_spec(task);
  PyJson content = PyJson::array({{{"type", "text"}, {"text", fill_template(tmpl, req.prompt)}}});
  if (task == Task::kI2V)
    content.push_back({{"type", "image_url"}, {"image_url", {{"url", image_url(req.image)}}}});
  PyJson body = {
      {"model", req.model},
      {"messages", PyJson::array({{{"role", "user"}, {"content", std::move(content)}}})},
      {"max_tokens", req.max_tokens},
      {"response_format",
       {{"type", "json_schema"},
        {"json_schema", {{"name", spec.schema_name}, {"schema", response_schema(task)}, {"strict", true}}}}},
  };
  return body.dump();
}

PyJson caption_from_response(std::string_view body, Task task, std::string_view endpoint) {
  auto bad = [&](const std::string& cause) { return Error(str_cat(endpoint, ": ", cause)); };
  if (json_nesting_depth(body) > kMaxJsonDepth)
    throw bad(str_cat("the answer nests JSON deeper than ", kMaxJsonDepth, " levels"));
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw bad(str_cat("the answer is not a JSON object: '", head(body), "'"));
  const auto& choices = j.value("choices", nlohmann::json());
  if (!choices.is_array() || choices.empty() || !choices[0].is_object())
    throw bad("the answer has no choices[0] (not a chat-completions response?)");
  const nlohmann::json& choice = choices[0];
  const nlohmann::json message = choice.value("message", nlohmann::json());
  const nlohmann::json content = message.is_object() ? message.value("content", nlohmann::json()) : nlohmann::json();
  if (message.is_object() && message.contains("refusal") && message["refusal"].is_string() &&
      !content.is_string())
    throw bad(str_cat("the model refused: '", head(message["refusal"].get<std::string>(), 200), "'"));
  if (!content.is_string()) throw bad("the answer has no choices[0].message.content text");
  const std::string& text = content.get_ref<const std::string&>();
  std::string err;
  const std::optional<PyJson> caption = qwen35::py_json_loads(text, &err);
  if (!caption) {
    const bool cut = choice.value("finish_reason", nlohmann::json()) == "length";
    throw bad(str_cat("the caption is not valid JSON (", err, ")",
                      cut ? ": the answer stopped at max_tokens (finish_reason length; raise --pe-max-tokens)" : "",
                      "; content starts '", head(text), "'"));
  }
  check_caption(*caption, task, endpoint);
  return *caption;
}

EnhanceResult enhance_prompt(const Endpoint& ep, const EnhanceRequest& req) {
  const auto t0 = std::chrono::steady_clock::now();
  EnhanceResult r;
  r.task = req.image.empty() ? Task::kT2V : Task::kI2V;
  const std::string body = chat_request_body(req, r.task);
  const std::string answer = post_chat_completion(ep, body, &r.call);
  const std::string endpoint = redact(str_cat("prompt enhancement endpoint ", chat_completions_url(ep.base_url)),
                                      ep.api_key);
  try {
    r.caption = caption_from_response(answer, r.task, endpoint);
  } catch (const Error& e) {
    throw Error(redact(e.what(), ep.api_key));
  }
  r.markdown = render_caption_markdown(r.caption);
  r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

namespace {

size_t code_points(const std::string& s) { return qwen35::utf8_decode(s, "prompt").size(); }

}  // namespace

std::string report_line(const Endpoint& ep, const EnhanceRequest& req, const EnhanceResult& r) {
  return str_cat("prompt enhancement: ", task_spec(r.task).name, " via ",
                 redact(chat_completions_url(ep.base_url), ep.api_key), " (model ", req.model, "): ", r.call.attempts,
                 r.call.attempts == 1 ? " attempt" : " attempts", ", HTTP ", r.call.status, ", ",
                 static_cast<long long>(r.ms + 0.5), " ms; prompt ", code_points(req.prompt), " -> ",
                 code_points(r.markdown), " chars");
}

nlohmann::json metrics_json(const Endpoint& ep, const EnhanceRequest& req, const EnhanceResult& r) {
  return {{"task", task_spec(r.task).name},
          {"endpoint", redact(chat_completions_url(ep.base_url), ep.api_key)},
          {"model", req.model},
          {"attempts", r.call.attempts},
          {"http_status", r.call.status},
          {"ms", r.ms},
          {"wait_ms", r.call.waited_ms},
          {"response_bytes", r.call.response_bytes},
          {"prompt_chars", code_points(req.prompt)},
          {"enhanced_chars", code_points(r.markdown)}};
}

}  // namespace magi2::pe
