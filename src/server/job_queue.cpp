#include "server/job_queue.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "server/video_request.h"

namespace magi2::server {

namespace {

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// "video_" + 24 hex digits from a per-process random generator.
std::string new_job_id() {
  static std::mutex mu;
  static std::mt19937_64 gen{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mu);
  char buf[32];
  std::snprintf(buf, sizeof buf, "video_%016llx%08x", static_cast<unsigned long long>(gen()),
                static_cast<unsigned>(gen() & 0xffffffffu));
  return buf;
}

bool finished(JobStatus s) { return s == JobStatus::Completed || s == JobStatus::Failed || s == JobStatus::Cancelled; }

void remove_quietly(const std::string& path) {
  if (path.empty()) return;
  std::error_code ec;
  std::filesystem::remove(path, ec);
}

}  // namespace

const char* status_name(JobStatus s) {
  switch (s) {
    case JobStatus::Queued: return "queued";
    case JobStatus::InProgress: return "in_progress";
    case JobStatus::Completed: return "completed";
    case JobStatus::Failed: return "failed";
    case JobStatus::Cancelled: return "cancelled";
  }
  return "unknown";
}

JobQueue::JobQueue(Engine& engine, QueueOptions opt) : engine_(engine), opt_(std::move(opt)) {
  worker_ = std::thread([this] { worker(); });
}

JobQueue::~JobQueue() {
  shutdown(true);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

std::shared_ptr<Job> JobQueue::submit(JobRequest request) {
  auto job = std::make_shared<Job>();
  job->id = new_job_id();
  job->created_at = unix_now();
  job->request = std::move(request);
  const std::filesystem::path dir(opt_.output_dir);
  job->mp4_path = (dir / (job->id + ".mp4")).string();
  job->thumbnail_path = (dir / (job->id + ".png")).string();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || queue_.size() >= opt_.max_queued) {
      ++stats_.rejected_total;
      remove_quietly(job->request.upload);
      throw QueueRefused{stopping_};
    }
    ++stats_.submitted_total;
    jobs_[job->id] = job;
    order_.push_back(job->id);
    queue_.push_back(job);
    push_event(*job, "status", nlohmann::json{{"id", job->id}, {"status", "queued"}}.dump());
  }
  cv_.notify_all();
  return job;
}

std::shared_ptr<Job> JobQueue::find(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : it->second;
}

JobSnapshot JobQueue::snapshot(const Job& j) const {
  std::lock_guard<std::mutex> lock(mu_);
  return {j.id, j.created_at, j.completed_at, j.request, j.status, j.progress, j.eta_s, j.error_code,
          j.error_message, j.mp4_path, j.thumbnail_path};
}

std::vector<JobSnapshot> JobQueue::list() const {
  std::vector<std::shared_ptr<Job>> jobs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& id : order_) jobs.push_back(jobs_.at(id));
  }
  std::vector<JobSnapshot> out;
  for (const auto& j : jobs) out.push_back(snapshot(*j));
  return out;
}

bool JobQueue::cancel(const std::string& id) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end() || finished(it->second->status)) return false;
  const std::shared_ptr<Job> keep = it->second;  // retention may drop it from jobs_ below
  Job& job = *keep;
  job.cancel_requested = true;
  if (job.status == JobStatus::Queued) {
    for (auto q = queue_.begin(); q != queue_.end(); ++q)
      if (q->get() == &job) {
        queue_.erase(q);
        break;
      }
    finish(job, JobStatus::Cancelled, "", "");
  }
  lock.unlock();
  cv_.notify_all();
  return true;
}

bool JobQueue::remove(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end() || !finished(it->second->status)) return false;
  erase_job(id);
  return true;
}

std::vector<JobEvent> JobQueue::wait_events(const Job& job, size_t from, int timeout_ms, bool* done) const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
               [&] { return job.events.size() > from || finished(job.status); });
  *done = finished(job.status);
  std::vector<JobEvent> out;
  for (size_t i = from; i < job.events.size(); ++i) out.push_back(job.events[i]);
  return out;
}

void JobQueue::shutdown(bool cancel_running) {
  std::unique_lock<std::mutex> lock(mu_);
  stopping_ = true;
  while (!queue_.empty()) {
    std::shared_ptr<Job> j = queue_.front();
    queue_.pop_front();
    j->cancel_requested = true;
    finish(*j, JobStatus::Cancelled, "", "");
  }
  if (cancel_running && running_) running_->cancel_requested = true;
  cv_.notify_all();
  cv_.wait(lock, [&] { return !running_; });
}

bool JobQueue::shutting_down() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stopping_;
}

QueueStats JobQueue::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  QueueStats s = stats_;
  s.queued = queue_.size();
  s.running = running_ != nullptr;
  return s;
}

void JobQueue::push_event(Job& job, const std::string& event, const std::string& data) {
  job.events.push_back({event, data});
}

// Called with mu_ held.
void JobQueue::finish(Job& job, JobStatus status, const std::string& code, const std::string& message) {
  job.status = status;
  job.completed_at = unix_now();
  job.error_code = code;
  job.error_message = message;
  if (status == JobStatus::Completed) job.progress = 100;
  ++stats_.finished_total[status_name(status)];
  // Previews are large; late SSE readers get the final state, not old frames.
  for (JobEvent& e : job.events)
    if (e.event == "preview") e.data = "{}";
  nlohmann::json d = {{"id", job.id}, {"status", status_name(status)}, {"progress", job.progress}};
  if (!message.empty()) d["error"] = {{"code", code}, {"message", message}};
  push_event(job, status_name(status), d.dump());
  remove_quietly(job.request.upload);
  apply_retention();
}

// Called with mu_ held: drops the oldest finished jobs beyond keep_finished, with their files.
void JobQueue::apply_retention() {
  std::vector<std::string> finished_ids;
  for (const std::string& id : order_)
    if (finished(jobs_.at(id)->status)) finished_ids.push_back(id);
  for (size_t i = 0; i + opt_.keep_finished < finished_ids.size(); ++i) erase_job(finished_ids[i]);
}

// Called with mu_ held.
void JobQueue::erase_job(const std::string& id) {
  const Job& j = *jobs_.at(id);
  remove_quietly(j.mp4_path);
  remove_quietly(j.thumbnail_path);
  order_.erase(std::find(order_.begin(), order_.end(), id));
  jobs_.erase(id);
}

void JobQueue::worker() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and nothing left
      job = queue_.front();
      queue_.pop_front();
      running_ = job;
      job->status = JobStatus::InProgress;
      push_event(*job, "status", nlohmann::json{{"id", job->id}, {"status", "in_progress"}}.dump());
    }
    cv_.notify_all();
    run_job(job);
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_.reset();
    }
    cv_.notify_all();
  }
}

void JobQueue::run_job(const std::shared_ptr<Job>& job) {
  GenerateParams p = job->request.params;
  p.label = str_cat("request ", job->id);
  p.outputs.mp4_path = job->mp4_path;
  p.thumbnail_path = job->thumbnail_path;
  GenerateCallbacks cb;
  cb.should_cancel = [&] { return job->cancel_requested.load(); };
  cb.on_progress = [&](const Progress& pr) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      // The loop is most of the work; decoding and writing take the last few percent.
      job->progress = pr.step * 95 / pr.steps;
      job->eta_s = pr.eta_s;
      ++stats_.steps_total;
      stats_.step_seconds_total += pr.step_ms / 1000.0;
      push_event(*job, "progress",
                 nlohmann::json{{"id", job->id}, {"step", pr.step}, {"steps", pr.steps}, {"progress", job->progress},
                                {"step_ms", pr.step_ms}, {"eta_seconds", pr.eta_s}}
                     .dump());
    }
    cv_.notify_all();
  };
  cb.preview_every = job->request.preview_every;
  cb.on_preview = [&](const Preview& pv) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      push_event(*job, "preview",
                 nlohmann::json{{"id", job->id}, {"step", pv.step}, {"mime_type", "image/png"},
                                {"image_base64", base64_encode(pv.png)}}
                     .dump());
    }
    cv_.notify_all();
  };
  JobStatus status = JobStatus::Completed;
  std::string code, message;
  try {
    const GenerateOutcome o = engine_.generate(p, cb);
    if (o.cancelled) status = JobStatus::Cancelled;
  } catch (const std::exception& e) {
    status = JobStatus::Failed;
    code = "generation_failed";
    message = e.what();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    finish(*job, status, code, message);
  }
  cv_.notify_all();
}

}  // namespace magi2::server
