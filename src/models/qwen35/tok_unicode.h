// Unicode helpers for the Qwen3.5 tokenizer and the prompt normaliser: strict
// UTF-8 decoding, the Python `str` whitespace / printable predicates the
// official prompt code relies on, and NFC with per-character alignment in the
// form the HF `tokenizers` normalizer produces it (needed for token offsets).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace magi2::qwen35 {

/// Half-open range [first, second) of code-point indices into some original text.
using CpRange = std::pair<int64_t, int64_t>;

/// Decodes UTF-8 into code points.
/// Errors: magi2::Error naming `what` and the byte offset for any malformed
/// sequence (truncated, overlong, surrogate, beyond U+10FFFF, stray byte).
std::u32string utf8_decode(std::string_view s, std::string_view what);

/// Appends the UTF-8 encoding of `cp` (a valid scalar value) to `out`.
void utf8_append(std::string& out, char32_t cp);

/// UTF-8 encoding of a code-point string.
std::string utf8_encode(std::u32string_view s);

/// Python's `str.isspace()` for one code point (the set `str.split()` and
/// `str.strip()` use): \t \n \v \f \r, U+001C-U+001F, space, U+0085, U+00A0,
/// U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000.
/// Source: CPython `_PyUnicode_IsWhitespace` (Unicode 14/15 data; the set is
/// stable across those versions).
bool py_isspace(char32_t cp);

/// Python's `str.isprintable()` for one code point: false for general
/// categories Cc, Cf, Cs, Co, Cn, Zl, Zp and Zs other than U+0020.
/// Decided with PCRE2's Unicode tables (which may be one Unicode version apart
/// from the official Python; only affects `repr` of exotic characters).
bool py_isprintable(char32_t cp);

/// `" ".join(s.split())` on UTF-8 text (Python whitespace, see py_isspace).
/// Input must be valid UTF-8 (Error otherwise).
std::string py_collapse_whitespace(std::string_view s);

/// Python `s.strip()` / `s.rstrip()` on UTF-8 text (Python whitespace).
std::string py_strip(std::string_view s);
std::string py_rstrip(std::string_view s);

/// Result of NFC normalisation with alignment.
struct NfcResult {
  std::u32string text;          ///< NFC-normalised code points
  std::vector<CpRange> align;   ///< per output code point: original range (absolute)
};

/// Unicode NFC of `in`, where in[i] is original code point `base + i`, as the
/// HF `tokenizers` NFC normalizer computes it (the official Qwen3.5
/// tokenizer.json normalizer).
///
/// Two HF specifics are reproduced: (1) its normalisation data is Unicode 9.0,
/// so characters assigned later count as unassigned (class 0, no mappings;
/// e.g. U+1DF9 is not reordered before U+0300); (2) alignment follows HF's
/// NormalizedString transform: every output character carries a change
/// (decomposition: first piece 0, further pieces +1; reordering keeps each
/// piece's change; a composition adds the absorbed piece's change - 1); a
/// character with change <= 0 takes the alignment of the next unconsumed input
/// character and consumes 1 - change of them, one with change > 0 shares the
/// alignment of the last consumed input character. So "e" + U+0301 -> "é"
/// maps to the range of "e" only (golden qwen35_text_tiny `emoji_misc`).
/// Verified against tokenizers 0.23 on every code point followed by
/// combining marks, every canonical decomposition and Hangul L+V+T sequences.
///
/// Text made only of characters that NFC can never change (checked against a
/// few large ranges: Latin-1 + Latin Extended, Cyrillic, punctuation, CJK,
/// kana, Hangul syllables, full-width forms, emoji) is returned as-is. Other
/// text needs the Unicode normalisation data, which is taken from the ICU
/// common library (libicuuc.so.N, loaded at run time on first use; the build
/// links no ICU).
/// Errors: magi2::Error when such text must be normalised and ICU cannot be
/// loaded.
NfcResult nfc_with_alignment(std::u32string_view in, int64_t base);

/// True when NFC can change no character of `in` (the table-free fast path).
bool nfc_trivially_stable(std::u32string_view in);

/// Forces the ICU-backed path even for trivially stable text (tests only:
/// lets the fast path be compared against the full algorithm).
NfcResult nfc_with_alignment_full(std::u32string_view in, int64_t base);

}  // namespace magi2::qwen35
