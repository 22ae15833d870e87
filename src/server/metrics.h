// /metrics of `magi2 serve`: Prometheus text exposition format 0.0.4.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "server/job_queue.h"

namespace magi2::server {

/// Resident set size of this process in bytes (/proc/self/statm), 0 when unreadable.
int64_t resident_bytes();

/// The metrics page: magi2_queue_depth, magi2_jobs{status} (kept jobs by
/// state), magi2_jobs_finished_total{status}, magi2_jobs_submitted_total,
/// magi2_jobs_rejected_total, magi2_step_seconds (summary: _sum, _count),
/// magi2_process_resident_memory_bytes. No device memory gauge while the
/// engine runs on the CPU backend (the process RSS is that memory).
std::string prometheus_text(const QueueStats& stats, const std::vector<JobSnapshot>& jobs);

}  // namespace magi2::server
