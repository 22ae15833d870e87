// Shared helpers of the libFuzzer harnesses (see docs/hardening.md). Each
// harness feeds one reader arbitrary bytes: magi2::Error is the expected
// answer to bad input; anything else (another exception, a crash, a sanitizer
// report, an allocation over libFuzzer's -malloc_limit_mb) is a finding.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "io/mmap_file.h"

namespace magi2::fuzz {

/// The input as text.
inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

/// Writes the input to one scratch file per process (in /dev/shm when it
/// exists) for readers that take a path; returns the path.
inline const std::string& scratch_file(const uint8_t* data, size_t size, const char* ext) {
  static const std::string path = std::string(::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") +
                                  "/magi2_fuzz_" + std::to_string(::getpid()) + ext;
  write_file_atomic(path, std::string(reinterpret_cast<const char*>(data), size));
  return path;
}

}  // namespace magi2::fuzz
