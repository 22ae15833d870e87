// Oniguruma-compatible regular expressions on top of PCRE2, for the
// pre-tokenizer `Split` patterns of HF tokenizer.json files.
//
// HF `tokenizers` compiles these patterns with Oniguruma (Ruby syntax, UTF-8).
// PCRE2 (UTF + UCP) agrees on \p{..} classes, alternation order, lazy and
// possessive quantifiers and look-around, but not on a few escapes; those are
// rewritten before compiling (see onig_to_pcre2).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace magi2::qwen35 {

/// Rewrites an Oniguruma (Ruby syntax, Unicode) pattern into a PCRE2 pattern
/// with the same meaning under PCRE2_UTF | PCRE2_UCP:
///  - `\s` -> [\t\n\x0B\f\r\x{85}\p{Z}] (Oniguruma's Unicode \s includes NEL
///    U+0085, PCRE2's does not); `\S` the complement (outside classes only);
///  - `\h` / `\H` -> hex digit / non-hex digit (Ruby meaning, not PCRE2's
///    horizontal space);
///  - `\w` / `\W` -> letters, marks, decimal digits, connector punctuation;
///  - `\p{L}`, `\p{M}`, `\p{N}` (and `\P{..}`) -> the PCRE2 property plus the
///    code points Unicode 15.0-16.0 added to it (Oniguruma in tokenizers 0.23
///    has Unicode 16 tables, PCRE2 10.42 Unicode 14); other properties pass;
///  - `\uHHHH` -> `\x{HHHH}`;
///  - `\U` -> the letter `U`: Oniguruma's Ruby syntax has no `\U` escape and
///    reads it as a literal, which is why the official MAGI CJK pattern's
///    `\U00020000-\U0002FFFF` turns into the class range `0`-`U`
///    (shared/golden/README.md, qwen35_text_tiny, cjk_split_probe).
/// Errors: magi2::Error naming `what` for constructs whose translation is not
/// implemented (\S or \W inside a character class, unterminated escapes).
std::string onig_to_pcre2(std::string_view pattern, std::string_view what);

/// A compiled pattern (PCRE2, JIT when available). Immutable after
/// construction and safe to use from several threads.
class Regex {
 public:
  /// Compiles an Oniguruma pattern (translated with onig_to_pcre2).
  /// Errors: magi2::Error naming `what`, the PCRE2 message and offset.
  Regex(std::string_view onig_pattern, std::string what);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  /// All non-overlapping, leftmost-first matches in `text` (valid UTF-8), as
  /// byte ranges [begin, end), in order. Empty matches are not reported (the
  /// search then advances one character), as HF's Split drops empty pieces.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

  /// The translated pattern handed to PCRE2 (for diagnostics).
  const std::string& pcre2_pattern() const { return translated_; }

 private:
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
  std::string what_;
  std::string translated_;
};

}  // namespace magi2::qwen35
