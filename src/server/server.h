// `magi2 serve`: an OpenAI-style /v1/videos HTTP API (cpp-httplib) over one
// engine and its job queue. Routes, fields and errors: docs/server.md.
#pragma once

#include <memory>
#include <string>

#include "engine/engine.h"
#include "server/job_queue.h"
#include "server/video_request.h"

namespace magi2::server {

/// Options of the HTTP server.
struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                            ///< 0 = any free port (see VideoServer::port)
  std::string api_key;                        ///< "" = no authentication; else "Authorization: Bearer KEY"
  size_t max_body_bytes = 32u << 20;          ///< larger request bodies get 413
  int http_threads = 32;                      ///< connections served at once (SSE and /sync hold one each)
  QueueOptions queue;                         ///< output folder, queue bound, retention
  RequestLimits limits;                       ///< per-request limits
};

class VideoServer {
 public:
  /// Makes the output folder, starts the job worker and binds the socket.
  /// Errors (one line): an uncreatable output folder, a port that cannot be bound.
  VideoServer(Engine& engine, ServerOptions opt);
  ~VideoServer();

  /// The bound port (the chosen one when ServerOptions::port was 0).
  int port() const;

  /// Serves until stop(); returns then.
  void serve();

  /// Graceful stop: new jobs are refused (503), queued ones cancelled, the
  /// running one finishes (or is cancelled at its next step when
  /// `cancel_running`), then the listener closes and serve() returns.
  /// Safe from any thread; a second call with cancel_running = true cancels
  /// a job the first call is waiting for.
  void stop(bool cancel_running);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace magi2::server
