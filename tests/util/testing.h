// Shared helpers for the tests: fixture paths, tensor comparison statistics.
#pragma once

#include <string>

#include "core/tensor.h"

namespace magi2::test {

/// ../shared/golden (or $MAGI2_GOLDEN_DIR).
std::string golden_dir();
/// Path of the built `magi2` binary.
std::string magi2_binary();
/// A fresh empty temporary directory (removed at process exit is not promised).
std::string temp_dir(const std::string& tag);

/// Error statistics of `a` against reference `b` (same numel, any float dtypes).
struct Diff {
  double rel_rms = 0;   ///< ||a-b|| / ||b||
  double max_abs = 0;
  double ref_rms = 0;
};
Diff compare(const Tensor& a, const Tensor& b);

/// Runs a shell command, returns its exit status; stdout+stderr into *output.
int run_command(const std::string& cmd, std::string* output);

}  // namespace magi2::test
