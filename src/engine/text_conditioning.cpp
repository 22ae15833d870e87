#include "engine/text_conditioning.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "core/error.h"
#include "io/mmap_file.h"
#include "models/qwen35/prompt.h"
#include "models/qwen35/tok_unicode.h"

namespace magi2 {

namespace fs = std::filesystem;

std::string find_text_encoder_dir(const std::string& model_root, const std::string& override_dir) {
  const fs::path dir = override_dir.empty() ? fs::path(model_root) / "text_encoder" : fs::path(override_dir);
  std::error_code ec;
  MAGI2_CHECK(fs::is_regular_file(dir / "config.json", ec), "text encoder folder '", dir.string(),
              "' has no config.json",
              override_dir.empty() ? " (pass --text-encoder DIR, or --text-features FILE to generate)" : "");
  return dir.string();
}

namespace {

// Python str.isspace(): the characters str.strip() removes.
bool py_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace

std::string read_prompt_file(const std::string& path) {
  const std::string why = file_problem(path);
  MAGI2_CHECK(why.empty(), "prompt file '", path, "' ", why);
  const std::u32string text = qwen35::utf8_decode(read_text_file(path), str_cat("prompt file '", path, "'"));
  size_t b = 0, e = text.size();
  while (b < e && py_isspace(text[b])) ++b;
  while (e > b && py_isspace(text[e - 1])) --e;
  if (b == e) return qwen35::utf8_encode(text);  // only whitespace: left for prompt_problem to name
  return qwen35::utf8_encode(std::u32string_view(text).substr(b, e - b));
}

void require_prompt(std::string_view prompt, const std::string& what) {
  const std::string why = prompt_problem(prompt);
  MAGI2_CHECK(why.empty(), what, ": the prompt ", why, ": give a prompt with some text");
}

std::string prompt_problem(std::string_view prompt) {
  if (prompt.empty()) return "is empty";
  // ASCII first: one printable byte settles it without decoding.
  bool ascii = true;
  for (const char ch : prompt) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x80)
      ascii = false;
    else if (!py_isspace(c))
      return "";
  }
  if (!ascii) {
    std::u32string cps;
    try {
      cps = qwen35::utf8_decode(prompt, "prompt");
    } catch (const Error&) {
      return "";  // not blank; the tokenizer reports the bad bytes with their position
    }
    for (const char32_t c : cps)
      if (!py_isspace(c)) return "";
  }
  return "is only whitespace";
}

std::string plain_json_message(const std::string& what) {
  std::string m = what;
  for (;;) {
    const size_t b = m.find("[json.exception.");
    if (b == std::string::npos) break;
    const size_t e = m.find("] ", b);
    m.erase(b, e == std::string::npos ? std::string::npos : e + 2 - b);
  }
  for (const char* from : {"parse error at ", "syntax error while parsing ", "parse error: "}) {
    const size_t p = m.find(from);
    if (p != std::string::npos)
      m.replace(p, std::strlen(from), std::string_view(from).starts_with("syntax") ? "while parsing " : "at ");
  }
  return m;
}

std::string negative_prompt_or_default(const std::string& flag_value) {
  return flag_value.empty() ? std::string(qwen35::default_negative_prompt()) : flag_value;
}

qwen35::PreparedPrompt tokenize_prompt(const qwen35::Tokenizer& tok, const std::string& prompt, bool i2v,
                                       bool allow_truncate, const std::string& what, bool warn) {
  qwen35::EncodeOptions opt;
  qwen35::PreparedPrompt pp;
  try {
    (void)qwen35::normalize_prompt(prompt, qwen35::JsonPromptPolicy::kStrict);  // malformed JSON: an error
    pp = qwen35::prepare_prompt(tok, prompt, i2v, opt);
  } catch (const Error& e) {
    throw Error(str_cat(what, ": ", plain_json_message(e.what())));
  }
  const qwen35::Encoding& e = pp.encoding;
  if (e.truncated()) {
    MAGI2_CHECK(allow_truncate, what, ": the prompt has ", e.untruncated_length, " tokens, over the limit of ",
                opt.max_length, " (pass --truncate to cut it as the official encoder does)");
    if (warn)
      std::fprintf(stderr, "magi2: warning: %s: prompt truncated from %lld to %lld tokens (the official limit)\n",
                   what.c_str(), static_cast<long long>(e.untruncated_length), static_cast<long long>(e.size()));
  }
  if (warn && e.num_dropped_bytes > 0)
    std::fprintf(stderr, "magi2: warning: %s: %lld input bytes have no token in the vocabulary and were dropped\n",
                 what.c_str(), static_cast<long long>(e.num_dropped_bytes));
  return pp;
}

qwen35::TextFeatures encode_prompt(const qwen35::TextEncoder& enc, const std::string& prompt, bool i2v,
                                   bool allow_truncate, const std::string& what) {
  qwen35::TextFeatures f;
  f.prompt = tokenize_prompt(enc.tokenizer(), prompt, i2v, allow_truncate, what, true);
  f.features = enc.features(f.prompt.encoding.ids);
  if (i2v) f.special_token = qwen35::special_token(f.features, f.prompt.figure_indices);
  return f;
}

}  // namespace magi2
