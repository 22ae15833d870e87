// The prompt-enhancement flags shared by `magi2 enhance-prompt` and
// `magi2 generate --enhance-prompt`: one table (flag, MAGI2_* mirror, help),
// resolved into the library's Endpoint / EnhanceRequest. The API key is read
// here and never printed.
#pragma once

#include <cstddef>
#include <string>

#include "prompt_enhance/enhancer.h"

namespace CLI {
class App;
}

namespace magi2::cli {

/// Values of the --pe-* flags (defaults: pe::Endpoint / pe::EnhanceRequest).
struct PeArgs {
  std::string base_url;      ///< --pe-base-url; empty: $OPENAI_BASE_URL
  std::string api_key_file;  ///< --pe-api-key-file; empty: $OPENAI_API_KEY (may be unset: no key)
  std::string model = pe::EnhanceRequest{}.model;
  std::string template_file;  ///< --pe-template; empty: the built-in template of the task
  std::string ca_file;
  double timeout_s = pe::Endpoint{}.timeout_s;
  int retries = pe::Endpoint{}.max_retries;
  int max_tokens = pe::EnhanceRequest{}.max_tokens;
  size_t max_response_bytes = pe::Endpoint{}.max_response_bytes;
};

/// Registers the --pe-* options on `s`.
void add_pe_options(CLI::App* s, PeArgs& a);

/// The endpoint: URL from the flag or $OPENAI_BASE_URL, key from the key file
/// (whitespace-stripped) or $OPENAI_API_KEY. Errors: no URL, unreadable or
/// empty key file (naming the file, never its contents).
pe::Endpoint pe_endpoint(const PeArgs& a);

/// The request for `prompt` (+ `image` for I2V), with --pe-template read.
pe::EnhanceRequest pe_request(const PeArgs& a, const std::string& prompt, const std::string& image);

/// Runs the enhancement with CLI-friendly errors (JSON library tags removed).
pe::EnhanceResult run_prompt_enhancement(const pe::Endpoint& ep, const pe::EnhanceRequest& req);

}  // namespace magi2::cli
