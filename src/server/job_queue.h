// The server's jobs: a bounded FIFO queue in front of one engine, one worker
// thread that runs one job at a time (the DiT step owns the compute device),
// per-job progress events for SSE readers, cancel, and a retention limit on
// finished jobs and their files. Thread-safe: HTTP handler threads call it
// concurrently.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"

namespace magi2::server {

/// Lifecycle of a job (the OpenAI video object's `status`, plus cancelled).
enum class JobStatus { Queued, InProgress, Completed, Failed, Cancelled };

/// "queued", "in_progress", "completed", "failed", "cancelled".
const char* status_name(JobStatus s);

/// One server-sent event: its `event:` name and its `data:` JSON text.
struct JobEvent {
  std::string event;
  std::string data;
};

/// What the client asked for, as echoed in the video object.
struct JobRequest {
  std::string model;      ///< the client's model name (echoed, not used to pick a model)
  std::string prompt;
  std::string seconds;    ///< as given ("1", "4", ...)
  std::string size;       ///< "WxH"
  int preview_every = 0;  ///< SSE preview frame every N steps (0: none)
  GenerateParams params;  ///< the engine request; output paths are set by the queue
  std::string upload;     ///< a reference image file the queue owns (deleted with the job); "" = none
};

/// A job. Fields below `status` change over time: read them through
/// JobQueue::snapshot (under the queue's lock).
struct Job {
  std::string id;
  int64_t created_at = 0;  ///< Unix seconds
  JobRequest request;
  std::string mp4_path, thumbnail_path;  ///< final output files (exist once completed)
  std::atomic<bool> cancel_requested{false};

  JobStatus status = JobStatus::Queued;
  int progress = 0;            ///< percent, 0..100
  int64_t completed_at = 0;    ///< Unix seconds, 0 while not finished
  double eta_s = 0;
  std::string error_code, error_message;  ///< set when failed
  std::vector<JobEvent> events;           ///< every event so far (SSE replays them)
};

/// A consistent copy of a job's changing fields.
struct JobSnapshot {
  std::string id;
  int64_t created_at = 0, completed_at = 0;
  JobRequest request;
  JobStatus status = JobStatus::Queued;
  int progress = 0;
  double eta_s = 0;
  std::string error_code, error_message;
  std::string mp4_path, thumbnail_path;
};

/// Options of the queue.
struct QueueOptions {
  std::string output_dir;      ///< where <id>.mp4 and <id>.png go (must exist)
  size_t max_queued = 16;      ///< waiting jobs beyond the running one; more are refused
  size_t keep_finished = 100;  ///< finished jobs kept (with their files); the oldest go first
};

/// Counters for /metrics.
struct QueueStats {
  size_t queued = 0;
  bool running = false;
  std::map<std::string, int64_t> finished_total;  ///< by final status name, since start
  int64_t steps_total = 0;
  double step_seconds_total = 0;
  int64_t submitted_total = 0, rejected_total = 0;
};

/// Thrown by submit when the queue is full (HTTP 429) or shutting down (503).
struct QueueRefused {
  bool shutting_down = false;
};

class JobQueue {
 public:
  /// Starts the worker thread on `engine` (which must outlive the queue).
  JobQueue(Engine& engine, QueueOptions opt);
  /// shutdown(true) then joins the worker.
  ~JobQueue();
  JobQueue(const JobQueue&) = delete;
  JobQueue& operator=(const JobQueue&) = delete;

  /// Queues a job; returns it. Throws QueueRefused when max_queued jobs are
  /// already waiting or the queue is shutting down.
  std::shared_ptr<Job> submit(JobRequest request);

  /// The job with `id`, or null (unknown or dropped by retention).
  std::shared_ptr<Job> find(const std::string& id) const;
  JobSnapshot snapshot(const Job& job) const;
  /// Every kept job, oldest first.
  std::vector<JobSnapshot> list() const;

  /// Cancels a job: a queued one at once, a running one at the next step
  /// boundary. Returns false when it had already finished.
  bool cancel(const std::string& id);

  /// Drops a finished job and its files (DELETE of a finished video).
  /// Returns false when it is unknown or not finished.
  bool remove(const std::string& id);

  /// Waits up to `timeout_ms` for events after the first `from` ones or for
  /// the job to finish; returns the new events and sets `*finished`.
  std::vector<JobEvent> wait_events(const Job& job, size_t from, int timeout_ms, bool* finished) const;

  /// Stops taking jobs (submit refuses), cancels every queued job, and lets
  /// the running one finish (or cancels it at its next step when
  /// `cancel_running`); returns when the worker is idle. Idempotent.
  void shutdown(bool cancel_running);
  bool shutting_down() const;

  QueueStats stats() const;

 private:
  void worker();
  void run_job(const std::shared_ptr<Job>& job);
  void finish(Job& job, JobStatus status, const std::string& code, const std::string& message);
  void push_event(Job& job, const std::string& event, const std::string& data);
  void apply_retention();
  void erase_job(const std::string& id);

  Engine& engine_;
  QueueOptions opt_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;  // any job change, new work, shutdown
  std::map<std::string, std::shared_ptr<Job>> jobs_;
  std::vector<std::string> order_;  // creation order of kept jobs
  std::deque<std::shared_ptr<Job>> queue_;
  std::shared_ptr<Job> running_;
  bool stopping_ = false, cancel_running_ = false;
  QueueStats stats_;
  std::thread worker_;
};

}  // namespace magi2::server
