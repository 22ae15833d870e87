// A loopback OpenAI-compatible endpoint for the prompt-enhancement tests: an
// httplib::Server on 127.0.0.1 (a free port) that records every request and
// answers from a scripted list (the last reply repeats). Given a certificate
// and key (PEM files) it serves https instead.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace magi2::test {

/// One scripted answer.
struct FakeReply {
  int status = 200;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  int delay_ms = 0;  ///< wait before answering (cut short when the server stops)
};

/// A chat-completions answer whose choices[0].message.content is `content`.
inline std::string chat_answer(const std::string& content, const std::string& finish_reason = "stop") {
  return nlohmann::json{{"id", "chatcmpl-test"},
                        {"object", "chat.completion"},
                        {"choices", {{{"index", 0},
                                      {"message", {{"role", "assistant"}, {"content", content}}},
                                      {"finish_reason", finish_reason}}}}}
      .dump();
}

class FakeOpenAI {
 public:
  /// What the server received.
  struct Seen {
    std::string method, path, authorization, body;
  };

  FakeOpenAI(const std::string& cert_pem = "", const std::string& key_pem = "")
      : server_ptr_(cert_pem.empty() ? std::make_unique<httplib::Server>()
                                     : std::make_unique<httplib::SSLServer>(cert_pem.c_str(), key_pem.c_str())),
        server_(*server_ptr_),
        scheme_(cert_pem.empty() ? "http" : "https") {
    server_.Post(".*", [this](const httplib::Request& req, httplib::Response& res) { handle(req, res); });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeOpenAI() { stop(); }
  FakeOpenAI(const FakeOpenAI&) = delete;
  FakeOpenAI& operator=(const FakeOpenAI&) = delete;

  /// Stops listening (the port then refuses connections).
  void stop() {
    stopping_ = true;
    if (thread_.joinable()) {
      server_.stop();
      thread_.join();
    }
  }

  int port() const { return port_; }
  /// "http[s]://127.0.0.1:PORT/v1" (the usual OpenAI-compatible prefix).
  std::string base_url() const { return scheme_ + "://127.0.0.1:" + std::to_string(port_) + "/v1"; }

  void script(std::vector<FakeReply> replies) {
    std::lock_guard<std::mutex> lock(mu_);
    replies_ = std::move(replies);
    next_ = 0;
  }
  std::vector<Seen> seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }

 private:
  void handle(const httplib::Request& req, httplib::Response& res) {
    FakeReply r;
    {
      std::lock_guard<std::mutex> lock(mu_);
      seen_.push_back({req.method, req.path, req.get_header_value("Authorization"), req.body});
      if (!replies_.empty()) r = replies_[std::min(next_++, replies_.size() - 1)];
    }
    for (int waited = 0; waited < r.delay_ms && !stopping_; waited += 10)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    res.status = r.status;
    for (const auto& [k, v] : r.headers) res.set_header(k, v);
    res.set_content(r.body, "application/json");
  }

  std::unique_ptr<httplib::Server> server_ptr_;
  httplib::Server& server_;
  std::string scheme_;
  std::thread thread_;
  int port_ = -1;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::vector<FakeReply> replies_;
  size_t next_ = 0;
  std::vector<Seen> seen_;
};

}  // namespace magi2::test
