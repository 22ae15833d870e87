#include "cache_env.h"

#include <cstdlib>

namespace magi2::cli {

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

}  // namespace

CacheEnv cache_env() { return {env("MAGI2_CACHE_DIR"), env("XDG_CACHE_HOME"), env("HOME")}; }

}  // namespace magi2::cli
