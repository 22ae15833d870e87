// Temporary files removed when the process is interrupted. Every writer
// builds its output beside the target (PATH.tmp.<pid>) and renames it when
// complete; a SIGINT/SIGTERM in between would leave that partial file behind.
// A registered path is unlinked by the signal handler before the signal's
// default action (termination) proceeds.
#pragma once

#include <string>

namespace magi2 {

/// Registers `path` for removal on SIGINT/SIGTERM while the guard lives; the
/// destructor only unregisters (the owner renames or removes the file
/// itself). The first guard installs the handlers, and only for signals whose
/// disposition is still the default (an application's own handler is left
/// alone). At most 64 paths are tracked at once; beyond that a path is simply
/// not cleaned up on a signal (never an error). Async-signal-safe removal: the
/// handler calls only unlink() and raise().
class TempFileGuard {
 public:
  explicit TempFileGuard(std::string path);
  ~TempFileGuard();
  TempFileGuard(const TempFileGuard&) = delete;
  TempFileGuard& operator=(const TempFileGuard&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int slot_ = -1;
};

/// Number of paths registered now (tests).
int registered_temp_files();

}  // namespace magi2
