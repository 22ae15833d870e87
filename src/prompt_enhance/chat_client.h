// A bounded HTTP(S) client for one OpenAI-compatible call:
// POST {base_url}/chat/completions, through cpp-httplib (OpenSSL for https).
// Bounded in every direction: a per-attempt deadline, a few retries of 429 and
// 5xx answers with exponential backoff that honours Retry-After inside a total
// waiting budget, and a cap on the response size. The API key goes only into
// the Authorization header: no message, log line or statistic contains it.
#pragma once

#include <cstddef>
#include <string>

namespace magi2::pe {

/// Where and how to call. Defaults keep the worst case short: at most
/// 1 + max_retries attempts, and at most retry_budget_s seconds spent waiting
/// between them (under 10 s in all).
struct Endpoint {
  std::string base_url;  ///< "http[s]://host[:port][/prefix]", e.g. "http://127.0.0.1:8080/v1"
  std::string api_key;   ///< sent as "Authorization: Bearer KEY"; empty: no header
  std::string ca_file;   ///< https: PEM bundle to trust instead of the system's (empty: system)
  double timeout_s = 180;               ///< per attempt: connect + the whole answer (seconds)
  int max_retries = 3;                  ///< extra attempts after a 429 or 5xx answer
  double retry_budget_s = 8;            ///< total seconds of backoff / Retry-After waiting
  double backoff_s = 0.5;               ///< first backoff without Retry-After; doubles each retry
  size_t max_response_bytes = 8u << 20; ///< a larger answer (decoded) is refused
};

/// What one call did (for metrics and the one-line report; never the key).
struct CallStats {
  int attempts = 0;    ///< HTTP requests sent
  int status = 0;      ///< HTTP status of the last answer (0: none)
  double ms = 0;       ///< wall time of the whole call, waits included
  double waited_ms = 0;///< of which spent waiting before retries
  size_t response_bytes = 0;
};

/// `base_url` + "/chat/completions" (one slash between), for messages.
std::string chat_completions_url(const std::string& base_url);

/// Sends `body` (JSON text) and returns the body of the 2xx answer.
/// Errors (magi2::Error, one line, "prompt enhancement endpoint URL: cause",
/// the API key replaced by "***" wherever it would appear): a malformed
/// base_url (naming `url_flag`); cannot connect; no complete answer within
/// timeout_s; TLS failures; an answer over max_response_bytes; a non-2xx
/// status, quoting the endpoint's error message (shortened); 429 / 5xx after
/// the retries or the waiting budget ran out (saying which).
std::string post_chat_completion(const Endpoint& ep, const std::string& body, CallStats* stats = nullptr,
                                 const std::string& url_flag = "--pe-base-url");

/// `text` with every occurrence of `secret` replaced by "***" (no-op for an
/// empty secret). Applied to everything this module reports.
std::string redact(std::string text, const std::string& secret);

}  // namespace magi2::pe
