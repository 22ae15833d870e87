#include "server/server.h"

#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "core/error.h"
#include "server/metrics.h"

namespace magi2::server {

namespace {

void send_error(httplib::Response& res, const HttpError& e) {
  res.status = e.status;
  res.set_content(error_json(e).dump(), "application/json");
}

nlohmann::json video_json(const JobSnapshot& j) {
  nlohmann::json v = {{"id", j.id},
                      {"object", "video"},
                      {"model", j.request.model},
                      {"status", status_name(j.status)},
                      {"progress", j.progress},
                      {"created_at", j.created_at},
                      {"completed_at", j.completed_at ? nlohmann::json(j.completed_at) : nlohmann::json()},
                      {"expires_at", nlohmann::json()},
                      {"prompt", j.request.prompt},
                      {"seconds", j.request.seconds},
                      {"size", j.request.size},
                      {"remixed_from_video_id", nlohmann::json()},
                      {"error", nlohmann::json()}};
  if (j.status == JobStatus::InProgress) v["eta_seconds"] = j.eta_s;
  if (j.status == JobStatus::Failed) v["error"] = {{"code", j.error_code}, {"message", j.error_message}};
  return v;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return {};
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

// The request's fields, from a JSON body or multipart/form-data parts.
std::map<std::string, Field> request_fields(const httplib::Request& req) {
  if (req.is_multipart_form_data()) {
    std::map<std::string, Field> out;
    for (const auto& [name, part] : req.files) {
      Field& f = out[name];
      if (!part.filename.empty()) {
        f.is_file = true;
        f.bytes = part.content;
        f.filename = part.filename;
      } else {
        f.value = part.content;
      }
    }
    return out;
  }
  const std::string type = req.get_header_value("Content-Type");
  if (type.rfind("application/json", 0) != 0)
    throw HttpError{415, "", str_cat("Content-Type must be application/json or multipart/form-data, got '", type, "'")};
  return fields_from_json(req.body);
}

}  // namespace

struct VideoServer::Impl {
  Engine& engine;
  ServerOptions opt;
  JobQueue queue;
  httplib::Server http;
  int port = 0;
  std::mutex stop_mu;
  std::atomic<uint64_t> uploads{0};  // names of uploaded reference images

  Impl(Engine& e, ServerOptions o) : engine(e), opt(std::move(o)), queue(e, opt.queue) {}

  // Parses and queues a POST body; throws HttpError (4xx, 429, 503).
  std::shared_ptr<Job> submit(const httplib::Request& req) {
    const std::string upload =
        (std::filesystem::path(opt.queue.output_dir) / "uploads" / str_cat("ref_", uploads++, ".img")).string();
    JobRequest r = parse_video_request(request_fields(req), opt.limits, upload);
    try {
      return queue.submit(std::move(r));
    } catch (const QueueRefused& q) {
      if (q.shutting_down) throw HttpError{503, "", "the server is shutting down", "server_error"};
      throw HttpError{429, "", str_cat("the queue is full (", opt.queue.max_queued, " jobs waiting); retry later"),
                      "rate_limit_error"};
    }
  }

  std::shared_ptr<Job> job_or_404(const std::string& id) {
    auto job = queue.find(id);
    if (!job) throw HttpError{404, "video_id", str_cat("no video '", id, "'"), "invalid_request_error"};
    return job;
  }

  // Seconds a refused client should wait: one job's share of the recent step time.
  int retry_after_s() const {
    const QueueStats s = queue.stats();
    const double per_step = s.steps_total ? s.step_seconds_total / s.steps_total : 1.0;
    return std::max(1, static_cast<int>(per_step * 10));
  }

  void routes();
};

void VideoServer::Impl::routes() {
  // Every handler's HttpError becomes its JSON answer; anything else a 500.
  auto guard = [this](auto fn) {
    return [this, fn](const httplib::Request& req, httplib::Response& res) {
      try {
        fn(req, res);
      } catch (const HttpError& e) {
        send_error(res, e);
        if (e.status == 429) res.set_header("Retry-After", std::to_string(retry_after_s()));
      } catch (const std::exception& e) {
        send_error(res, {500, "", e.what(), "server_error"});
      }
    };
  };
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (opt.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    if (req.get_header_value("Authorization") == "Bearer " + opt.api_key)
      return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, {401, "", "missing or wrong API key (Authorization: Bearer KEY)", "authentication_error"});
    res.set_header("WWW-Authenticate", "Bearer");
    return httplib::Server::HandlerResponse::Handled;
  });
  // Errors httplib answers itself (unknown route, body too large) get a JSON body too.
  http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 413)
      send_error(res, {413, "", str_cat("request body over the limit of ", opt.max_body_bytes, " bytes")});
    else if (res.status == 404)
      send_error(res, {404, "", str_cat("no route ", req.method, " ", req.path)});
    else
      send_error(res, {res.status, "", str_cat("HTTP ", res.status)});
  });

  http.Post("/v1/videos", guard([this](const httplib::Request& req, httplib::Response& res) {
              const auto job = submit(req);
              res.set_content(video_json(queue.snapshot(*job)).dump(), "application/json");
            }));

  // Waits for the job and answers the MP4. A client that goes away cancels
  // its job. Headers go out when the job is queued, so a job that fails
  // later ends the stream early: X-Video-Id names it for GET /v1/videos/{id}.
  http.Post("/v1/videos/sync", guard([this](const httplib::Request& req, httplib::Response& res) {
              const auto job = submit(req);
              res.set_header("X-Video-Id", job->id);
              res.set_chunked_content_provider(
                  "video/mp4", [this, job](size_t, httplib::DataSink& sink) {
                    for (;;) {
                      bool done = false;
                      queue.wait_events(*job, SIZE_MAX, 100, &done);
                      if (done) break;
                      if (!sink.is_writable()) {
                        queue.cancel(job->id);
                        return false;
                      }
                    }
                    const JobSnapshot s = queue.snapshot(*job);
                    if (s.status != JobStatus::Completed) return false;
                    const std::string bytes = read_file(s.mp4_path);
                    if (bytes.empty() || !sink.write(bytes.data(), bytes.size())) return false;
                    sink.done();
                    return true;
                  });
            }));

  http.Get("/v1/videos", guard([this](const httplib::Request& req, httplib::Response& res) {
             std::vector<JobSnapshot> all = queue.list();
             const std::string order = req.has_param("order") ? req.get_param_value("order") : "desc";
             if (order != "asc" && order != "desc")
               throw HttpError{400, "order", str_cat("'order' must be asc or desc, got '", order, "'")};
             if (order == "desc") std::reverse(all.begin(), all.end());
             size_t limit = 20;
             if (req.has_param("limit")) {
               const std::string l = req.get_param_value("limit");
               if (l.empty() || l.find_first_not_of("0123456789") != std::string::npos || l.size() > 3 ||
                   std::stoi(l) < 1 || std::stoi(l) > 100)
                 throw HttpError{400, "limit", str_cat("'limit' must be an integer in [1, 100], got '", l, "'")};
               limit = std::stoul(l);
             }
             size_t start = 0;
             if (req.has_param("after")) {
               const std::string after = req.get_param_value("after");
               while (start < all.size() && all[start].id != after) ++start;
               if (start == all.size()) throw HttpError{400, "after", str_cat("no video '", after, "'")};
               ++start;
             }
             nlohmann::json data = nlohmann::json::array();
             for (size_t i = start; i < all.size() && data.size() < limit; ++i) data.push_back(video_json(all[i]));
             const bool more = start + data.size() < all.size();
             res.set_content(nlohmann::json{{"object", "list"},
                                            {"data", data},
                                            {"first_id", data.empty() ? nlohmann::json() : data.front()["id"]},
                                            {"last_id", data.empty() ? nlohmann::json() : data.back()["id"]},
                                            {"has_more", more}}
                                 .dump(),
                             "application/json");
           }));

  http.Get(R"(/v1/videos/([A-Za-z0-9_]+))", guard([this](const httplib::Request& req, httplib::Response& res) {
             res.set_content(video_json(queue.snapshot(*job_or_404(req.matches[1]))).dump(), "application/json");
           }));

  // Cancels an unfinished job (a queued one at once, a running one at its
  // next step); deletes a finished one and its files.
  http.Delete(R"(/v1/videos/([A-Za-z0-9_]+))", guard([this](const httplib::Request& req, httplib::Response& res) {
                const auto job = job_or_404(req.matches[1]);
                const bool cancelled = queue.cancel(job->id);
                nlohmann::json v = video_json(queue.snapshot(*job));
                if (!cancelled) {
                  queue.remove(job->id);
                  v = {{"id", job->id}, {"object", "video.deleted"}, {"deleted", true}};
                }
                res.set_content(v.dump(), "application/json");
              }));

  http.Get(R"(/v1/videos/([A-Za-z0-9_]+)/content)", guard([this](const httplib::Request& req, httplib::Response& res) {
             const JobSnapshot s = queue.snapshot(*job_or_404(req.matches[1]));
             const std::string variant = req.has_param("variant") ? req.get_param_value("variant") : "video";
             if (variant != "video" && variant != "thumbnail")
               throw HttpError{400, "variant", str_cat("'variant' must be video or thumbnail, got '", variant, "'")};
             if (s.status != JobStatus::Completed)
               throw HttpError{409, "video_id", str_cat("video '", s.id, "' is ", status_name(s.status), ", not completed")};
             const bool video = variant == "video";
             const std::string bytes = read_file(video ? s.mp4_path : s.thumbnail_path);
             if (bytes.empty()) throw HttpError{404, "video_id", str_cat("the files of video '", s.id, "' are gone")};
             res.set_content(bytes, video ? "video/mp4" : "image/png");
           }));

  // Server-sent events: every event of the job so far, then new ones as they
  // come, until it finishes; a comment line every second keeps proxies open.
  http.Get(R"(/v1/videos/([A-Za-z0-9_]+)/events)", guard([this](const httplib::Request& req, httplib::Response& res) {
             const auto job = job_or_404(req.matches[1]);
             res.set_header("Cache-Control", "no-cache");
             auto sent = std::make_shared<size_t>(0);
             res.set_chunked_content_provider("text/event-stream", [this, job, sent](size_t, httplib::DataSink& sink) {
               bool done = false;
               const std::vector<JobEvent> ev = queue.wait_events(*job, *sent, 1000, &done);
               std::string out;
               for (const JobEvent& e : ev) out += str_cat("event: ", e.event, "\ndata: ", e.data, "\n\n");
               if (ev.empty() && !done) out = ": keep-alive\n\n";
               *sent += ev.size();
               if (!sink.write(out.data(), out.size())) return false;
               // The final event is pushed with the final status, so `ev` held it.
               if (done) sink.done();
               return true;
             });
           }));

  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const QueueStats s = queue.stats();
    const bool stopping = queue.shutting_down();
    res.status = stopping ? 503 : 200;
    res.set_content(nlohmann::json{{"status", stopping ? "shutting_down" : "ok"},
                                   {"model", engine.model_root()},
                                   {"queue_depth", s.queued},
                                   {"running", s.running}}
                        .dump(),
                    "application/json");
  });

  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(prometheus_text(queue.stats(), queue.list()), "text/plain; version=0.0.4");
  });
}

VideoServer::VideoServer(Engine& engine, ServerOptions opt) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(opt.queue.output_dir) / "uploads", ec);
  MAGI2_CHECK(!ec, "--output-dir ", opt.queue.output_dir, ": cannot create it: ", ec.message());
  impl_ = std::make_unique<Impl>(engine, std::move(opt));
  Impl& s = *impl_;
  const int threads = s.opt.http_threads;
  s.http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  s.http.set_payload_max_length(s.opt.max_body_bytes);
  s.routes();
  if (s.opt.port == 0) {
    s.port = s.http.bind_to_any_port(s.opt.host);
  } else {
    s.port = s.http.bind_to_port(s.opt.host, s.opt.port) ? s.opt.port : -1;
  }
  MAGI2_CHECK(s.port > 0, "--host ", s.opt.host, " --port ", s.opt.port, ": cannot listen there (in use or not local?)");
}

VideoServer::~VideoServer() {
  stop(true);
}

int VideoServer::port() const { return impl_->port; }

void VideoServer::serve() { impl_->http.listen_after_bind(); }

void VideoServer::stop(bool cancel_running) {
  impl_->queue.shutdown(cancel_running);
  std::lock_guard<std::mutex> lock(impl_->stop_mu);
  if (impl_->http.is_running()) impl_->http.stop();
}

}  // namespace magi2::server
