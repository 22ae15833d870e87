#include "prompt_enhance/chat_client.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_depth.h"

namespace magi2::pe {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct ParsedUrl {
  std::string origin;  ///< scheme://host[:port]
  std::string prefix;  ///< path before /chat/completions, no trailing slash ("" or "/v1")
};

ParsedUrl parse_base_url(const std::string& url, const std::string& flag) {
  auto bad = [&](const char* why) { return Error(str_cat(flag, " '", url, "': ", why)); };
  if (url.empty()) throw Error(str_cat("no prompt enhancement endpoint: give ", flag, " URL (or set OPENAI_BASE_URL)"));
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) throw bad("not a URL (expected http://HOST[:PORT][/PATH] or https://...)");
  const std::string scheme = url.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https") throw bad("only http:// and https:// endpoints are supported");
#ifndef CPPHTTPLIB_OPENSSL_SUPPORT
  if (scheme == "https") throw bad("this build has no TLS support (cpp-httplib without OpenSSL)");
#endif
  for (char c : url)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7F) throw bad("contains a space or control character");
  const size_t host_begin = scheme_end + 3;
  const size_t path_begin = url.find('/', host_begin);
  const std::string authority = url.substr(host_begin, path_begin == std::string::npos ? std::string::npos
                                                                                        : path_begin - host_begin);
  if (authority.empty()) throw bad("has no host");
  if (authority.find('@') != std::string::npos) throw bad("credentials in the URL are not supported (use the API key)");
  if (url.find_first_of("?#") != std::string::npos) throw bad("a query or fragment is not supported");
  ParsedUrl p{scheme + "://" + authority, path_begin == std::string::npos ? "" : url.substr(path_begin)};
  while (!p.prefix.empty() && p.prefix.back() == '/') p.prefix.pop_back();
  return p;
}

// One line of at most `max` bytes (cut on a UTF-8 boundary), for quoting
// the endpoint's words inside our error line.
std::string shorten(std::string s, size_t max = 200) {
  for (char& c : s)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  if (s.size() <= max) return s;
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut) + "...";
}

// The endpoint's own explanation: OpenAI's {"error": {"message": ...}},
// {"error": "..."}, {"message": ...} or {"detail": ...}; else the raw body.
std::string error_message(const std::string& body) {
  if (json_nesting_depth(body) > kMaxJsonDepth) return body;  // not an error object of any endpoint
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_object()) {
    for (const char* key : {"error", "message", "detail"}) {
      auto it = j.find(key);
      if (it == j.end()) continue;
      if (it->is_string()) return it->get<std::string>();
      if (it->is_object() && it->contains("message") && (*it)["message"].is_string())
        return (*it)["message"].get<std::string>();
      return it->dump();
    }
  }
  return body.empty() ? "(empty body)" : body;
}

// Retry-After: delta-seconds or an HTTP-date; nullopt when absent/unreadable.
std::optional<double> retry_after_s(const httplib::Response& res) {
  if (!res.has_header("Retry-After")) return std::nullopt;
  const std::string v = res.get_header_value("Retry-After");
  char* end = nullptr;
  const double s = std::strtod(v.c_str(), &end);
  if (end != v.c_str() && *end == '\0' && std::isfinite(s)) return std::max(0.0, s);
  std::tm tm{};
  if (strptime(v.c_str(), "%a, %d %b %Y %H:%M:%S", &tm) == nullptr) return std::nullopt;
  return std::max(0.0, std::difftime(timegm(&tm), std::time(nullptr)));
}

bool retryable(int status) { return status == 429 || (status >= 500 && status <= 599); }

std::string transport_error(httplib::Error e, double timeout_s, double elapsed_s) {
  switch (e) {
    case httplib::Error::Connection: return "cannot connect (connection refused or host unreachable)";
    case httplib::Error::ConnectionTimeout: return str_cat("cannot connect within ", timeout_s, " s (--pe-timeout)");
    case httplib::Error::Read:
      if (elapsed_s + 0.05 >= timeout_s) return str_cat("no complete answer within ", timeout_s, " s (--pe-timeout)");
      return "the connection closed before a complete answer";
    case httplib::Error::Write: return "the connection closed while sending the request";
    case httplib::Error::SSLConnection: return "TLS handshake failed";
    case httplib::Error::SSLLoadingCerts: return "cannot load the trusted certificates (--pe-ca-file)";
    case httplib::Error::SSLServerVerification: return "the server's TLS certificate did not verify";
    default: return str_cat("HTTP client error: ", httplib::to_string(e));
  }
}

}  // namespace

std::string redact(std::string text, const std::string& secret) {
  if (secret.empty()) return text;
  for (size_t at = text.find(secret); at != std::string::npos; at = text.find(secret, at + 3))
    text.replace(at, secret.size(), "***");
  return text;
}

std::string chat_completions_url(const std::string& base_url) {
  std::string b = base_url;
  while (!b.empty() && b.back() == '/') b.pop_back();
  return b + "/chat/completions";
}

std::string post_chat_completion(const Endpoint& ep, const std::string& body, CallStats* stats,
                                 const std::string& url_flag) {
  const ParsedUrl url = parse_base_url(ep.base_url, url_flag);
  const std::string where = str_cat("prompt enhancement endpoint ", url.origin, url.prefix, "/chat/completions");
  auto fail = [&](const std::string& cause) { return Error(redact(str_cat(where, ": ", cause), ep.api_key)); };
  MAGI2_CHECK(ep.timeout_s > 0 && std::isfinite(ep.timeout_s), "--pe-timeout must be > 0 seconds, got ", ep.timeout_s);
  MAGI2_CHECK(ep.max_retries >= 0, "--pe-retries must be >= 0, got ", ep.max_retries);

  httplib::Client cli(url.origin);
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(std::ceil(ep.timeout_s * 1000)));
  cli.set_connection_timeout(timeout);
  cli.set_read_timeout(timeout);
  cli.set_write_timeout(timeout);
  cli.set_keep_alive(false);
  cli.set_follow_location(false);
#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
  if (!ep.ca_file.empty()) cli.set_ca_cert_path(ep.ca_file);
  cli.enable_server_certificate_verification(true);
#endif

  CallStats local;
  CallStats& st = stats ? *stats : local;
  st = CallStats{};
  const auto t_call = Clock::now();
  for (;;) {
    ++st.attempts;
    httplib::Request req;
    req.method = "POST";
    req.path = url.prefix + "/chat/completions";
    req.headers = {{"Content-Type", "application/json"}, {"Accept", "application/json"}, {"User-Agent", "magi2.cpp"}};
    if (!ep.api_key.empty()) req.headers.emplace("Authorization", "Bearer " + ep.api_key);
    req.body = body;
    std::string received, cancel_reason;
    const auto t_attempt = Clock::now();
    req.response_handler = [&](const httplib::Response& r) {
      if (r.has_header("Content-Length")) {
        const unsigned long long n = std::strtoull(r.get_header_value("Content-Length").c_str(), nullptr, 10);
        if (n > ep.max_response_bytes) {
          cancel_reason = str_cat("the answer (", n, " bytes) exceeds the ", ep.max_response_bytes,
                                  "-byte limit (--pe-max-response-bytes)");
          return false;
        }
      }
      return true;
    };
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      if (received.size() + n > ep.max_response_bytes) {
        cancel_reason = str_cat("the answer exceeds the ", ep.max_response_bytes,
                                "-byte limit (--pe-max-response-bytes)");
        return false;
      }
      if (seconds_since(t_attempt) > ep.timeout_s) {
        cancel_reason = str_cat("no complete answer within ", ep.timeout_s, " s (--pe-timeout)");
        return false;
      }
      received.append(data, n);
      return true;
    };
    httplib::Result res = cli.send(req);
    st.ms = seconds_since(t_call) * 1000;
    st.response_bytes = received.size();
    if (!res) {
      if (res.error() == httplib::Error::Canceled && !cancel_reason.empty()) throw fail(cancel_reason);
      throw fail(transport_error(res.error(), ep.timeout_s, seconds_since(t_attempt)));
    }
    st.status = res->status;
    if (st.status >= 200 && st.status <= 299) return received;

    const std::string said = shorten(redact(error_message(received), ep.api_key));
    std::string cause = str_cat("HTTP ", st.status, ": ", said);
    if (!retryable(st.status)) throw fail(cause);
    if (st.attempts > ep.max_retries)
      throw fail(str_cat(cause, " (after ", st.attempts, " attempts; --pe-retries ", ep.max_retries, ")"));
    const std::optional<double> asked = retry_after_s(*res);
    const double wait = asked ? *asked : ep.backoff_s * std::pow(2.0, st.attempts - 1);
    if (st.waited_ms / 1000 + wait > ep.retry_budget_s)
      throw fail(str_cat(cause, " (after ", st.attempts, " attempts; ", asked ? "the endpoint asked to wait " : "waiting ",
                         wait, " s more would exceed the ", ep.retry_budget_s, " s retry budget)"));
    std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    st.waited_ms += wait * 1000;
  }
}

}  // namespace magi2::pe
