#include "server/metrics.h"

#include <unistd.h>

#include <cstdio>
#include <map>

#include "core/error.h"

namespace magi2::server {

int64_t resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  long long pages_total = 0, pages_resident = 0;
  const int n = std::fscanf(f, "%lld %lld", &pages_total, &pages_resident);
  std::fclose(f);
  return n == 2 ? pages_resident * static_cast<int64_t>(::sysconf(_SC_PAGESIZE)) : 0;
}

std::string prometheus_text(const QueueStats& s, const std::vector<JobSnapshot>& jobs) {
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help) {
    out += str_cat("# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
  };
  metric("magi2_queue_depth", "gauge", "Jobs waiting for the engine.");
  out += str_cat("magi2_queue_depth ", s.queued, "\n");
  metric("magi2_jobs", "gauge", "Kept jobs by status.");
  std::map<std::string, int64_t> by_status;
  for (const char* st : {"queued", "in_progress", "completed", "failed", "cancelled"}) by_status[st] = 0;
  for (const JobSnapshot& j : jobs) ++by_status[status_name(j.status)];
  for (const auto& [st, n] : by_status) out += str_cat("magi2_jobs{status=\"", st, "\"} ", n, "\n");
  metric("magi2_jobs_finished_total", "counter", "Jobs finished since start, by final status.");
  for (const char* st : {"completed", "failed", "cancelled"}) {
    auto it = s.finished_total.find(st);
    out += str_cat("magi2_jobs_finished_total{status=\"", st, "\"} ", it == s.finished_total.end() ? 0 : it->second, "\n");
  }
  metric("magi2_jobs_submitted_total", "counter", "Jobs accepted since start.");
  out += str_cat("magi2_jobs_submitted_total ", s.submitted_total, "\n");
  metric("magi2_jobs_rejected_total", "counter", "Jobs refused (queue full or shutting down) since start.");
  out += str_cat("magi2_jobs_rejected_total ", s.rejected_total, "\n");
  metric("magi2_step_seconds", "summary", "Wall time of denoising steps.");
  char sum[64];
  std::snprintf(sum, sizeof sum, "%.6f", s.step_seconds_total);
  out += str_cat("magi2_step_seconds_sum ", sum, "\nmagi2_step_seconds_count ", s.steps_total, "\n");
  metric("magi2_process_resident_memory_bytes", "gauge", "Resident memory of the server process.");
  out += str_cat("magi2_process_resident_memory_bytes ", resident_bytes(), "\n");
  return out;
}

}  // namespace magi2::server
