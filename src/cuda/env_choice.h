// Measurement knobs of the CUDA backend read from the environment
// (MAGI2_MOE_KERNEL, MAGI2_FP8_PREFETCH, MAGI2_CONV_KERNEL, MAGI2_MHC_KERNEL,
// ...): one reader, so every knob is read once and refused the same way.
// The user-facing choices travel as options (ops/backend_options.h), not here.
#pragma once

#include <initializer_list>

namespace magi2::cuda {

/// The index in `choices` of environment variable `name`'s value, read once
/// per process and name (thread-safe; later calls return the first answer);
/// -1 when unset or empty. Throws Error "NAME='v': expected 'a', 'b' or 'c'"
/// for any other value.
int env_choice(const char* name, std::initializer_list<const char*> choices);

}  // namespace magi2::cuda
