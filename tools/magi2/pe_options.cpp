#include "pe_options.h"

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "io/mmap_file.h"
#include "models/qwen35/tok_unicode.h"
#include "engine/text_conditioning.h"

namespace magi2::cli {

namespace {

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

void add_pe_options(CLI::App* s, PeArgs& a) {
  s->add_option("--pe-base-url", a.base_url,
                "prompt enhancement: OpenAI-compatible endpoint base URL, e.g. http://127.0.0.1:8080/v1 "
                "(default: $OPENAI_BASE_URL)")
      ->envname("MAGI2_PE_BASE_URL");
  s->add_option("--pe-api-key-file", a.api_key_file,
                "prompt enhancement: file holding the API key (default: $OPENAI_API_KEY; none: no key sent)")
      ->envname("MAGI2_PE_API_KEY_FILE");
  s->add_option("--pe-model", a.model, "prompt enhancement: model name sent to the endpoint")
      ->envname("MAGI2_PE_MODEL")
      ->capture_default_str();
  s->add_option("--pe-template", a.template_file,
                "prompt enhancement: request template ({user_input_text}, {variation_seed}; the official "
                "prompts/t2v.md, i2v.md work; default: built-in)")
      ->envname("MAGI2_PE_TEMPLATE");
  s->add_option("--pe-timeout", a.timeout_s, "prompt enhancement: seconds per attempt (connect + whole answer)")
      ->envname("MAGI2_PE_TIMEOUT")
      ->capture_default_str();
  s->add_option("--pe-retries", a.retries,
                "prompt enhancement: retries after HTTP 429/5xx (backoff, Retry-After honoured, < 10 s of waiting)")
      ->envname("MAGI2_PE_RETRIES")
      ->capture_default_str();
  s->add_option("--pe-max-tokens", a.max_tokens, "prompt enhancement: max_tokens of the request")
      ->envname("MAGI2_PE_MAX_TOKENS")
      ->capture_default_str();
  s->add_option("--pe-max-response-bytes", a.max_response_bytes, "prompt enhancement: larger answers are refused")
      ->envname("MAGI2_PE_MAX_RESPONSE_BYTES")
      ->capture_default_str();
  s->add_option("--pe-ca-file", a.ca_file, "prompt enhancement: PEM certificates to trust for https (default: system)")
      ->envname("MAGI2_PE_CA_FILE");
}

pe::Endpoint pe_endpoint(const PeArgs& a) {
  pe::Endpoint ep;
  ep.base_url = a.base_url.empty() ? env_or_empty("OPENAI_BASE_URL") : a.base_url;
  MAGI2_CHECK(!ep.base_url.empty(), "no prompt enhancement endpoint: give --pe-base-url URL (or set OPENAI_BASE_URL)");
  if (!a.api_key_file.empty()) {
    std::error_code ec;
    MAGI2_CHECK(std::filesystem::is_regular_file(a.api_key_file, ec), "--pe-api-key-file '", a.api_key_file,
                "': no such file");
    ep.api_key = qwen35::py_strip(read_text_file(a.api_key_file));
    MAGI2_CHECK(!ep.api_key.empty(), "--pe-api-key-file '", a.api_key_file, "': the file holds no key");
    MAGI2_CHECK(ep.api_key.find_first_of("\r\n") == std::string::npos, "--pe-api-key-file '", a.api_key_file,
                "': the key must be one line");
  } else {
    ep.api_key = env_or_empty("OPENAI_API_KEY");
  }
  ep.ca_file = a.ca_file;
  ep.timeout_s = a.timeout_s;
  ep.max_retries = a.retries;
  ep.max_response_bytes = a.max_response_bytes;
  MAGI2_CHECK(a.retries >= 0 && a.retries <= 10, "--pe-retries must be in 0..10, got ", a.retries);
  MAGI2_CHECK(a.max_tokens > 0, "--pe-max-tokens must be > 0, got ", a.max_tokens);
  MAGI2_CHECK(a.max_response_bytes > 0, "--pe-max-response-bytes must be > 0");
  return ep;
}

pe::EnhanceRequest pe_request(const PeArgs& a, const std::string& prompt, const std::string& image) {
  pe::EnhanceRequest r;
  r.prompt = prompt;
  r.image = image;
  r.model = a.model;
  r.max_tokens = a.max_tokens;
  if (!a.template_file.empty()) {
    std::error_code ec;
    MAGI2_CHECK(std::filesystem::is_regular_file(a.template_file, ec), "--pe-template '", a.template_file,
                "': no such file");
    r.template_text = read_text_file(a.template_file);
    (void)qwen35::utf8_decode(r.template_text, str_cat("--pe-template '", a.template_file, "'"));
    MAGI2_CHECK(r.template_text.find("{user_input_text}") != std::string::npos, "--pe-template '",
                a.template_file, "': the template has no {user_input_text} placeholder");
  }
  return r;
}

pe::EnhanceResult run_prompt_enhancement(const pe::Endpoint& ep, const pe::EnhanceRequest& req) {
  try {
    return pe::enhance_prompt(ep, req);
  } catch (const Error& e) {
    throw Error(pe::redact(plain_json_message(e.what()), ep.api_key));
  }
}

}  // namespace magi2::cli
