// Python-compatible handling of JSON values for the prompt normaliser: the
// official code parses prompts with `json.loads`, turns non-string values into
// text with `str()`, and re-serialises with `json.dumps(..., ensure_ascii=False)`.
// These helpers reproduce those exact texts on nlohmann::ordered_json values.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace magi2::qwen35 {

/// JSON value with insertion-ordered keys (Python dicts keep order).
using PyJson = nlohmann::ordered_json;

/// Python `json.loads(text)`: the parsed value, or nullopt where Python would
/// raise JSONDecodeError (the message goes to *error when given).
/// Matches Python on key order and duplicate keys (last value, first
/// position) and rejects a leading BOM as Python does. Known differences:
/// Python also accepts NaN / Infinity / -Infinity and integers beyond 64 bits
/// (stored here as float); both are rejected / rounded here.
std::optional<PyJson> py_json_loads(std::string_view text, std::string* error = nullptr);

/// Python `str(v)` of a parsed JSON value: strings as-is, None -> "None",
/// bools -> "True"/"False", ints in decimal, floats as `repr(float)`
/// (shortest round-trip, "1e+16" / "1e-05" exponent style), lists and dicts
/// as Python `repr` (single-quoted strings with Python's escapes).
std::string py_str(const PyJson& v);

/// Python `repr(v)` (differs from py_str only for strings).
std::string py_repr(const PyJson& v);

/// Python `repr(float)`.
std::string py_float_repr(double x);

/// Python `json.dumps(v, ensure_ascii=False)` with the default separators
/// ", " and ": ".
std::string py_json_dumps(const PyJson& v);

}  // namespace magi2::qwen35
