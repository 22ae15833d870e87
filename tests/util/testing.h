// Shared helpers for the tests: fixture paths, tensor comparison statistics.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <initializer_list>
#include <string>

#include "core/error.h"
#include "core/tensor.h"

namespace magi2::test {

/// ../shared/golden (or $MAGI2_GOLDEN_DIR).
std::string golden_dir();
/// tests/fixtures in this checkout: official-code fixtures we made ourselves (the shared
/// golden folder is read-only and holds only what the project was given); or $MAGI2_FIXTURE_DIR.
std::string fixture_dir();
/// Path of the built `magi2` binary.
std::string magi2_binary();
/// A fresh empty temporary directory, removed when the test process exits.
std::string temp_dir(const std::string& tag);

/// Error statistics of `a` against reference `b` (same numel, any float dtypes).
struct Diff {
  double rel_rms = 0;   ///< ||a-b|| / ||b||
  double max_abs = 0;
  double ref_rms = 0;
};
Diff compare(const Tensor& a, const Tensor& b);

/// Elements whose bytes differ between two contiguous host tensors of one
/// dtype and element count.
int64_t differing_elements(const Tensor& a, const Tensor& b);

/// An official channels-first [1, C, L] audio tensor (any float dtype) as
/// channels-last [L, C] f32.
Tensor audio_channels_last(const Tensor& t);

/// Expects `f` to throw magi2::Error with a one-line message containing every
/// word (the engine's error contract: one line naming the thing at fault).
template <typename F>
::testing::AssertionResult throws_with(F&& f, std::initializer_list<std::string> words) {
  try {
    f();
  } catch (const Error& e) {
    const std::string m = e.what();
    for (const auto& w : words)
      if (m.find(w) == std::string::npos)
        return ::testing::AssertionFailure() << "message \"" << m << "\" lacks \"" << w << "\"";
    if (m.find('\n') != std::string::npos)
      return ::testing::AssertionFailure() << "message is not one line: \"" << m << "\"";
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-magi2 exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

/// Runs a shell command, returns its exit status; stdout+stderr into *output.
int run_command(const std::string& cmd, std::string* output);

}  // namespace magi2::test
