#include "io/temp_files.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

namespace magi2 {
namespace {

constexpr int kSlots = 64;
std::atomic<const char*> g_slots[kSlots];

void on_signal(int sig) {
  for (auto& s : g_slots) {
    const char* p = s.exchange(nullptr);
    if (p) ::unlink(p);
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void install_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int sig : {SIGINT, SIGTERM}) {
      struct sigaction old {};
      if (::sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) continue;
      struct sigaction sa {};
      sa.sa_handler = on_signal;
      sigemptyset(&sa.sa_mask);
      ::sigaction(sig, &sa, nullptr);
    }
  });
}

}  // namespace

TempFileGuard::TempFileGuard(std::string path) : path_(std::move(path)) {
  install_once();
  for (int i = 0; i < kSlots; ++i) {
    const char* expected = nullptr;
    if (g_slots[i].compare_exchange_strong(expected, path_.c_str())) {
      slot_ = i;
      break;
    }
  }
}

TempFileGuard::~TempFileGuard() {
  if (slot_ < 0) return;
  const char* expected = path_.c_str();
  g_slots[slot_].compare_exchange_strong(expected, nullptr);
}

int registered_temp_files() {
  int n = 0;
  for (const auto& s : g_slots) n += s.load() != nullptr;
  return n;
}

}  // namespace magi2
