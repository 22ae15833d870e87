#include "models/qwen35/tok_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"

namespace magi2::qwen35 {

namespace {

// Oniguruma's Unicode \s: the ASCII controls, NEL and general category Z.
constexpr const char* kSpaceBody = "\\t\\n\\x0B\\f\\r\\x{85}\\p{Z}";
// Oniguruma's Unicode \w: Letter | Mark | Decimal_Number | Connector_Punctuation.
constexpr const char* kHexBody = "0-9a-fA-F";

// Code points that Oniguruma in tokenizers 0.23 (Unicode 16.0) puts in L / M /
// N but PCRE2 10.42 (Unicode 14.0) does not know: Unicode 15.0-16.0
// assignments (CJK Ext H/I, Egyptian Ext-A, Kawi, Garay, Todhri, ...).
// Measured by probing every code point through both engines; the union is
// harmless with a newer PCRE2. No other L/M/N/Z difference exists.
constexpr const char* kExtraL =
    "\\x{1C89}-\\x{1C8A}\\x{A7CB}-\\x{A7CD}\\x{A7DA}-\\x{A7DC}\\x{105C0}-\\x{105F3}"
    "\\x{10D4A}-\\x{10D65}\\x{10D6F}-\\x{10D85}\\x{10EC2}-\\x{10EC4}\\x{1123F}-\\x{11240}"
    "\\x{11380}-\\x{11389}\\x{1138B}\\x{1138E}\\x{11390}-\\x{113B5}\\x{113B7}\\x{113D1}"
    "\\x{113D3}\\x{11BC0}-\\x{11BE0}\\x{11F02}\\x{11F04}-\\x{11F10}\\x{11F12}-\\x{11F33}"
    "\\x{1342F}\\x{13441}-\\x{13446}\\x{13460}-\\x{143FA}\\x{16100}-\\x{1611D}"
    "\\x{16D40}-\\x{16D6C}\\x{18CFF}\\x{1B132}\\x{1B155}\\x{1DF25}-\\x{1DF2A}"
    "\\x{1E030}-\\x{1E06D}\\x{1E4D0}-\\x{1E4EB}\\x{1E5D0}-\\x{1E5ED}\\x{1E5F0}\\x{2B739}"
    "\\x{2EBF0}-\\x{2EE5D}\\x{31350}-\\x{323AF}";
constexpr const char* kExtraM =
    "\\x{897}\\x{CF3}\\x{ECE}\\x{10D69}-\\x{10D6D}\\x{10EFC}-\\x{10EFF}\\x{11241}"
    "\\x{113B8}-\\x{113C0}\\x{113C2}\\x{113C5}\\x{113C7}-\\x{113CA}\\x{113CC}-\\x{113D0}"
    "\\x{113D2}\\x{113E1}-\\x{113E2}\\x{11F00}-\\x{11F01}\\x{11F03}\\x{11F34}-\\x{11F3A}"
    "\\x{11F3E}-\\x{11F42}\\x{11F5A}\\x{13440}\\x{13447}-\\x{13455}\\x{1611E}-\\x{1612F}"
    "\\x{1E08F}\\x{1E4EC}-\\x{1E4EF}\\x{1E5EE}-\\x{1E5EF}";
constexpr const char* kExtraN =
    "\\x{10D40}-\\x{10D49}\\x{116D0}-\\x{116E3}\\x{11BF0}-\\x{11BF9}\\x{11F50}-\\x{11F59}"
    "\\x{16130}-\\x{16139}\\x{16D70}-\\x{16D79}\\x{1CCF0}-\\x{1CCF9}\\x{1D2C0}-\\x{1D2D3}"
    "\\x{1E4F0}-\\x{1E4F9}\\x{1E5F1}-\\x{1E5FA}";

// Body of a class equivalent to Oniguruma's \p{X} for X in L, M, N.
std::string prop_body(char x) {
  std::string b = std::string("\\p{") + x + "}";
  b += x == 'L' ? kExtraL : x == 'M' ? kExtraM : kExtraN;
  return b;
}

const std::string& word_body() {
  static const std::string b = prop_body('L') + prop_body('M') + "\\p{Nd}\\p{Pc}";
  return b;
}

bool is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

}  // namespace

std::string onig_to_pcre2(std::string_view p, std::string_view what) {
  std::string out;
  out.reserve(p.size() + 32);
  bool in_class = false;
  bool class_start = false;  // just after '[' or '[^' (a ']' there is literal)
  for (size_t i = 0; i < p.size(); ++i) {
    const char ch = p[i];
    if (ch != '\\') {
      if (!in_class && ch == '[') {
        in_class = true;
        class_start = true;
        out.push_back(ch);
        if (i + 1 < p.size() && p[i + 1] == '^') out.push_back(p[++i]);
        continue;
      }
      if (in_class && ch == '[') {
        throw Error(str_cat(what, ": nested character classes are not supported in pattern '", p, "'"));
      }
      if (in_class && ch == ']' && !class_start) in_class = false;
      class_start = false;
      out.push_back(ch);
      continue;
    }
    class_start = false;
    MAGI2_CHECK(i + 1 < p.size(), what, ": pattern ends with a lone backslash: '", p, "'");
    const char e = p[++i];
    auto put_class = [&](const std::string& body, bool negated) {
      if (in_class) {
        MAGI2_CHECK(!negated, what, ": \\", e, " inside a character class is not supported in pattern '", p,
                    "'");
        out += body;
      } else {
        out += negated ? "[^" : "[";
        out += body;
        out += "]";
      }
    };
    switch (e) {
      case 's': put_class(kSpaceBody, false); break;
      case 'S': put_class(kSpaceBody, true); break;
      case 'w': put_class(word_body(), false); break;
      case 'W': put_class(word_body(), true); break;
      case 'p':
      case 'P': {
        // \p{L} / \p{M} / \p{N} get the newer Unicode assignments; other
        // properties pass through unchanged.
        if (i + 3 < p.size() && p[i + 1] == '{' && p[i + 3] == '}' &&
            (p[i + 2] == 'L' || p[i + 2] == 'M' || p[i + 2] == 'N')) {
          put_class(prop_body(p[i + 2]), e == 'P');
          i += 3;
        } else {
          out.push_back('\\');
          out.push_back(e);
        }
        break;
      }
      case 'h': put_class(kHexBody, false); break;
      case 'H': put_class(kHexBody, true); break;
      case 'U': out.push_back('U'); break;
      case 'u': {
        MAGI2_CHECK(i + 4 < p.size() && is_hex(p[i + 1]) && is_hex(p[i + 2]) && is_hex(p[i + 3]) &&
                        is_hex(p[i + 4]),
                    what, ": \\u needs four hex digits in pattern '", p, "'");
        out += "\\x{";
        out.append(p.substr(i + 1, 4));
        out += "}";
        i += 4;
        break;
      }
      default:
        out.push_back('\\');
        out.push_back(e);
        break;
    }
  }
  return out;
}

Regex::Regex(std::string_view onig_pattern, std::string what)
    : what_(std::move(what)), translated_(onig_to_pcre2(onig_pattern, what_)) {
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated_.data()), translated_.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    throw Error(str_cat(what_, ": cannot compile regex '", onig_pattern, "' (as PCRE2 '", translated_,
                        "'): ", reinterpret_cast<const char*>(msg), " at offset ", off));
  }
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  MAGI2_CHECK(md != nullptr, what_, ": out of memory for regex match data");
  const auto* subj = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos <= text.size()) {
    const int rc = jit_ ? pcre2_jit_match(code, subj, text.size(), pos, 0, md, nullptr)
                        : pcre2_match(code, subj, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(md);
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof(msg));
      throw Error(str_cat(what_, ": regex match failed: ", reinterpret_cast<const char*>(msg)));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t b = ov[0], e = ov[1];
    if (e > b) {
      out.emplace_back(b, e);
      pos = e;
    } else {
      // Empty match: step over one UTF-8 character.
      if (b >= text.size()) break;
      pos = b + 1;
      while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
    }
  }
  pcre2_match_data_free(md);
  return out;
}

}  // namespace magi2::qwen35
