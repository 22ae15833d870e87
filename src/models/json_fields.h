// Typed reads of config JSON fields shared by the config parsers (preview DiT,
// refiner): a field of the wrong JSON kind, an unknown key or a non-object
// section is one Error naming the file and the key path.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace magi2::config_json {

using json = nlohmann::json;

// Whether a JSON value has the kind a field needs. nlohmann's get<T>() converts
// silently between numbers and booleans (4.5 -> 4, true -> 1, 2^32 -> 0), so the
// kind is checked first; integers are accepted where a real number is expected.
inline bool has_kind(const json& v, const int*) {
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= static_cast<uint64_t>(INT32_MAX);
  return v.is_number_integer() && v.get<int64_t>() >= INT32_MIN && v.get<int64_t>() <= INT32_MAX;
}
inline bool has_kind(const json& v, const double*) { return v.is_number(); }
inline bool has_kind(const json& v, const bool*) { return v.is_boolean(); }
inline bool has_kind(const json& v, const std::string*) { return v.is_string(); }
inline bool has_kind(const json& v, const std::vector<int>*) {
  return v.is_array() && std::all_of(v.begin(), v.end(), [](const json& x) {
           return has_kind(x, static_cast<const int*>(nullptr));
         });
}

// Reads `obj[key]` into `out` when present; a type mismatch names the key and file.
template <typename T>
void get(const json& obj, const char* key, T* out, const std::string& where, const std::string& src) {
  if (!obj.contains(key)) return;
  const json& v = obj.at(key);
  if (!has_kind(v, static_cast<const T*>(out)))
    throw Error(str_cat("config '", src, "': ", where, key, " has the wrong type (", v.dump(), ")"));
  *out = v.get<T>();
}

// The sub-object `obj[key]`, or null when absent. A present non-object is an error:
// `"attn_gating": false` would otherwise be ignored and the default kept.
inline const json* section(const json& obj, const char* key, const std::string& where, const std::string& src) {
  if (!obj.contains(key)) return nullptr;
  const json& v = obj.at(key);
  if (!v.is_object())
    throw Error(str_cat("config '", src, "': ", where, key, " has the wrong type (", v.dump(),
                        "), expected an object"));
  return &v;
}

inline void check_keys(const json& obj, std::initializer_list<const char*> known, const std::string& where,
                const std::string& src) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool ok = false;
    for (const char* k : known) ok = ok || it.key() == k;
    if (!ok) throw Error(str_cat("config '", src, "': unknown key ", where, it.key()));
  }
}

/// Reads the backbone fields that the preview DiT's arch_config and the
/// refiner's magi2_refiner_arch_config share (hidden_size, head_dim,
/// num_query_groups, video/audio/text_in_channels, params_dtype) into the
/// same-named members of `r` (DitArch, RefinerArch), each when present.
template <typename Arch>
void get_backbone_fields(const json& a, Arch* r, const std::string& where, const std::string& src) {
  get(a, "hidden_size", &r->hidden_size, where, src);
  get(a, "head_dim", &r->head_dim, where, src);
  get(a, "num_query_groups", &r->num_query_groups, where, src);
  get(a, "video_in_channels", &r->video_in_channels, where, src);
  get(a, "audio_in_channels", &r->audio_in_channels, where, src);
  get(a, "text_in_channels", &r->text_in_channels, where, src);
  get(a, "params_dtype", &r->params_dtype, where, src);
}

}  // namespace magi2::config_json
