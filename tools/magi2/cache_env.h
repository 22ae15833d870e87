// The front end's side of the built-in model cache: the environment variables
// that the engine library itself never reads.
#pragma once

#include "engine/tiny_model.h"

namespace magi2::cli {

/// CacheEnv from $MAGI2_CACHE_DIR, $XDG_CACHE_HOME and $HOME (unset = empty).
/// Never throws.
CacheEnv cache_env();

}  // namespace magi2::cli
