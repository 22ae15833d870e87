// Running the magi2 binary from the CLI tests, and the one-line error contract
// (every failure is a single "magi2: error: ..." line and a non-zero exit).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "util/testing.h"

namespace magi2::test {

/// Exit status and combined stdout+stderr of one magi2 run.
struct CliRun {
  int rc;
  std::string out;
};

/// Runs `magi2 <args>` (args are passed to the shell as written).
inline CliRun magi2(const std::string& args) {
  CliRun r;
  r.rc = run_command(magi2_binary() + " " + args, &r.out);
  return r;
}

/// A failed run whose output holds exactly one "error" line, containing `must_contain`.
inline void expect_one_line_error(const CliRun& r, const std::string& must_contain) {
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find(must_contain), std::string::npos) << "missing '" << must_contain << "' in: " << r.out;
  const auto first = r.out.find("error");
  ASSERT_NE(first, std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("error", first + 1), std::string::npos) << "more than one error line: " << r.out;
}

}  // namespace magi2::test
