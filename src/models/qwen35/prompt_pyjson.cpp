#include "models/qwen35/prompt_pyjson.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "io/json_depth.h"
#include "models/qwen35/tok_unicode.h"

namespace magi2::qwen35 {

std::optional<PyJson> py_json_loads(std::string_view text, std::string* error) {
  // nlohmann skips a UTF-8 BOM silently; Python refuses it.
  if (text.size() >= 3 && text.substr(0, 3) == "\xEF\xBB\xBF") {
    if (error) *error = "Unexpected UTF-8 BOM";
    return std::nullopt;
  }
  if (json_nesting_depth(text) > kMaxJsonDepth) {
    if (error) *error = str_cat("nested deeper than ", kMaxJsonDepth, " levels");
    return std::nullopt;
  }
  try {
    return PyJson::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    if (error) *error = e.what();
    return std::nullopt;
  }
}

std::string py_float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  char buf[64];
  // Shortest round-trip digits, as Python's repr.
  const auto res = std::to_chars(buf, buf + sizeof(buf), x, std::chars_format::scientific);
  std::string s(buf, res.ptr);
  std::string sign;
  if (!s.empty() && s[0] == '-') {
    sign = "-";
    s.erase(0, 1);
  }
  const size_t epos = s.find('e');
  const int exp10 = std::stoi(s.substr(epos + 1));
  std::string digits;
  for (char c : s.substr(0, epos))
    if (c != '.') digits.push_back(c);
  const int n = static_cast<int>(digits.size());
  const int decpt = exp10 + 1;  // value = 0.DIGITS * 10^decpt
  std::string out = sign;
  if (decpt > 16 || decpt < -3) {
    out += digits.substr(0, 1);
    if (n > 1) out += "." + digits.substr(1);
    char e[16];
    std::snprintf(e, sizeof(e), "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    out += e;
  } else if (decpt <= 0) {
    out += "0." + std::string(-decpt, '0') + digits;
  } else if (decpt >= n) {
    out += digits + std::string(decpt - n, '0') + ".0";
  } else {
    out += digits.substr(0, decpt) + "." + digits.substr(decpt);
  }
  return out;
}

namespace {

std::string py_str_repr(const std::string& s) {
  const std::u32string cps = utf8_decode(s, "JSON string");
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  char hex[16];
  for (char32_t c : cps) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      std::snprintf(hex, sizeof(hex), "\\x%02x", static_cast<unsigned>(c));
      out += hex;
    } else if (c < 0x7F || py_isprintable(c)) {
      utf8_append(out, c);
    } else if (c <= 0xFF) {
      std::snprintf(hex, sizeof(hex), "\\x%02x", static_cast<unsigned>(c));
      out += hex;
    } else if (c <= 0xFFFF) {
      std::snprintf(hex, sizeof(hex), "\\u%04x", static_cast<unsigned>(c));
      out += hex;
    } else {
      std::snprintf(hex, sizeof(hex), "\\U%08x", static_cast<unsigned>(c));
      out += hex;
    }
  }
  out.push_back(quote);
  return out;
}

std::string scalar_str(const PyJson& v) {
  switch (v.type()) {
    case PyJson::value_t::null: return "None";
    case PyJson::value_t::boolean: return v.get<bool>() ? "True" : "False";
    case PyJson::value_t::number_integer: return std::to_string(v.get<int64_t>());
    case PyJson::value_t::number_unsigned: return std::to_string(v.get<uint64_t>());
    case PyJson::value_t::number_float: return py_float_repr(v.get<double>());
    default: break;
  }
  MAGI2_ASSERT(false);
  return {};
}

void json_escape(std::string& out, const std::string& s) {
  out.push_back('"');
  char hex[8];
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          std::snprintf(hex, sizeof(hex), "\\u%04x", c);
          out += hex;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out.push_back('"');
}

}  // namespace

std::string py_repr(const PyJson& v) {
  if (v.is_string()) return py_str_repr(v.get_ref<const std::string&>());
  if (v.is_array()) {
    std::string out = "[";
    bool first = true;
    for (const auto& e : v) {
      if (!first) out += ", ";
      first = false;
      out += py_repr(e);
    }
    return out + "]";
  }
  if (v.is_object()) {
    std::string out = "{";
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) out += ", ";
      first = false;
      out += py_str_repr(it.key()) + ": " + py_repr(it.value());
    }
    return out + "}";
  }
  return scalar_str(v);
}

std::string py_str(const PyJson& v) {
  if (v.is_string()) return v.get<std::string>();
  return py_repr(v);
}

std::string py_json_dumps(const PyJson& v) {
  std::string out;
  if (v.is_string()) {
    json_escape(out, v.get_ref<const std::string&>());
  } else if (v.is_array()) {
    out = "[";
    bool first = true;
    for (const auto& e : v) {
      if (!first) out += ", ";
      first = false;
      out += py_json_dumps(e);
    }
    out += "]";
  } else if (v.is_object()) {
    out = "{";
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) out += ", ";
      first = false;
      json_escape(out, it.key());
      out += ": " + py_json_dumps(it.value());
    }
    out += "}";
  } else if (v.is_null()) {
    out = "null";
  } else if (v.is_boolean()) {
    out = v.get<bool>() ? "true" : "false";
  } else if (v.is_number_float()) {
    const double x = v.get<double>();
    out = std::isnan(x) ? "NaN" : std::isinf(x) ? (x < 0 ? "-Infinity" : "Infinity") : py_float_repr(x);
  } else {
    out = scalar_str(v);
  }
  return out;
}

}  // namespace magi2::qwen35
