// The one-line report of a strict name binding (checkpoint tensors against a
// model's expected list), shared by every weight loader (DiT and refiner via
// strict_bind, Wan2.2 VAE encoder, Stable Audio VAE, Qwen3.5 text encoder).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace magi2 {

/// Up to `max_items` of `items` joined by ", ", then ", ... (N more)" when
/// some were left out. "" for an empty list.
std::string join_names(const std::vector<std::string>& items, size_t max_items);

/// Throws Error "HEAD N missing [a, b, ...]; N unexpected [...]; N with the
/// wrong shape/dtype [...]; N duplicated [...]" (only the non-empty lists,
/// each cut to `max_items` names by join_names) when any list is non-empty;
/// returns otherwise. `head` names the file and what it should match, ending
/// in ':' (e.g. "checkpoint 'P' does not match the DiT config:").
void throw_if_mismatch(const std::string& head, const std::vector<std::string>& missing,
                       const std::vector<std::string>& unexpected, const std::vector<std::string>& wrong,
                       const std::vector<std::string>& duplicated = {}, size_t max_items = 8);

}  // namespace magi2
