// One error type for the whole engine. Messages name the thing that is wrong
// (file, tensor, key, flag) so the CLI can print them as one line.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace magi2 {

/// The engine's only exception type. `what()` is a complete, single-line
/// message (no trailing newline) that names the offending object.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

/// Concatenates any streamable values into a string (light: usable from .cu
/// translation units, where fmt is not included).
template <typename... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

}  // namespace magi2

/// Throws magi2::Error with the concatenated message when `cond` is false.
/// For user-visible input validation as well as internal invariants.
#define MAGI2_CHECK(cond, ...)                                   \
  do {                                                           \
    if (!(cond)) throw ::magi2::Error(::magi2::str_cat(__VA_ARGS__)); \
  } while (0)

/// Internal invariant (a bug if it fires); names file and line.
#define MAGI2_ASSERT(cond)                                                        \
  do {                                                                            \
    if (!(cond))                                                                  \
      throw ::magi2::Error(::magi2::str_cat("internal error: ", #cond, " at ",    \
                                            __FILE__, ":", __LINE__));            \
  } while (0)
