// env_choice (env_choice.h).
#include "cuda/env_choice.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "core/error.h"

namespace magi2::cuda {

int env_choice(const char* name, std::initializer_list<const char*> choices) {
  static std::mutex mu;
  static std::map<std::string, int> seen;
  const std::lock_guard<std::mutex> lock(mu);
  if (const auto it = seen.find(name); it != seen.end()) return it->second;
  const char* v = std::getenv(name);
  int found = -1;
  if (v != nullptr && *v != '\0') {
    std::string expected;
    int i = 0;
    for (const char* c : choices) {
      if (std::strcmp(v, c) == 0) found = i;
      expected += str_cat(i == 0 ? "" : i + 1 == static_cast<int>(choices.size()) ? " or " : ", ", "'", c, "'");
      ++i;
    }
    MAGI2_CHECK(found >= 0, name, "='", v, "': expected ", expected);
  }
  seen.emplace(name, found);
  return found;
}

}  // namespace magi2::cuda
