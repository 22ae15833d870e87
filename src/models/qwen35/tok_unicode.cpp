#include "models/qwen35/tok_unicode.h"

#include <dlfcn.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <string>

#include "core/error.h"

namespace magi2::qwen35 {

std::u32string utf8_decode(std::string_view s, std::string_view what) {
  std::u32string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  auto fail = [&](size_t at) {
    throw Error(str_cat(what, " is not valid UTF-8 (malformed sequence at byte ", at, ")"));
  };
  while (i < n) {
    const unsigned char b0 = p[i];
    if (b0 < 0x80) {
      out.push_back(b0);
      ++i;
      continue;
    }
    int len = 0;
    char32_t cp = 0;
    char32_t min = 0;
    if ((b0 & 0xE0) == 0xC0) {
      len = 2, cp = b0 & 0x1F, min = 0x80;
    } else if ((b0 & 0xF0) == 0xE0) {
      len = 3, cp = b0 & 0x0F, min = 0x800;
    } else if ((b0 & 0xF8) == 0xF0) {
      len = 4, cp = b0 & 0x07, min = 0x10000;
    } else {
      fail(i);
    }
    if (i + len > n) fail(i);
    for (int k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) fail(i);
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail(i);
    out.push_back(cp);
    i += len;
  }
  return out;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) utf8_append(out, c);
  return out;
}

bool py_isspace(char32_t c) {
  if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
  if (c < 0x85) return false;
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

namespace {

// One compiled "[\p{C}\p{Z}]" class, used as a general-category oracle.
class NonPrintableClass {
 public:
  NonPrintableClass() {
    int err = 0;
    PCRE2_SIZE off = 0;
    const char* pat = "[\\p{C}\\p{Z}]";
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat), PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
    MAGI2_ASSERT(code_ != nullptr);
  }
  ~NonPrintableClass() { pcre2_code_free(code_); }
  bool matches(char32_t cp) const {
    std::string s;
    utf8_append(s, cp);
    pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
    const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0,
                               PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK, md, nullptr);
    pcre2_match_data_free(md);
    return rc > 0;
  }

 private:
  pcre2_code* code_ = nullptr;
};

}  // namespace

bool py_isprintable(char32_t cp) {
  if (cp == 0x20) return true;
  if (cp < 0x7F) return cp > 0x20;
  static const NonPrintableClass cls;
  return !cls.matches(cp);
}

std::string py_collapse_whitespace(std::string_view s) {
  const std::u32string cps = utf8_decode(s, "text");
  std::string out;
  bool pending_space = false;
  for (char32_t c : cps) {
    if (py_isspace(c)) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out.push_back(' ');
    pending_space = false;
    utf8_append(out, c);
  }
  return out;
}

std::string py_strip(std::string_view s) {
  std::u32string cps = utf8_decode(s, "text");
  size_t b = 0, e = cps.size();
  while (b < e && py_isspace(cps[b])) ++b;
  while (e > b && py_isspace(cps[e - 1])) --e;
  return utf8_encode(std::u32string_view(cps).substr(b, e - b));
}

std::string py_rstrip(std::string_view s) {
  std::u32string cps = utf8_decode(s, "text");
  size_t e = cps.size();
  while (e > 0 && py_isspace(cps[e - 1])) --e;
  return utf8_encode(std::u32string_view(cps).substr(0, e));
}

// ---------------------------------------------------------------------------
// NFC
// ---------------------------------------------------------------------------

namespace {

// Ranges whose every character has combining class 0, is its own NFC form
// and is never the second character of a canonical composition, so a string
// made only of them is NFC-invariant. Checked exhaustively against Python's
// unicodedata (Unicode 14) when written; deliberately limited to large,
// long-stable blocks (it is a fast path, ICU handles everything else).
constexpr std::pair<char32_t, char32_t> kNfcInertRanges[] = {
    {0x0000, 0x02FF},    // ASCII, Latin-1, Latin Extended-A/B, IPA
    {0x0400, 0x0482},    // Cyrillic (before the combining marks)
    {0x1E00, 0x1EFF},    // Latin Extended Additional (Vietnamese)
    {0x2002, 0x20CF},    // General Punctuation .. Currency (U+2000/2001 excluded)
    {0x2190, 0x2328},    // arrows, math operators, technical
    {0x232B, 0x2ADB},    // technical, box drawing, shapes, dingbats, math
    {0x2E00, 0x3029},    // supplemental punctuation, CJK radicals, CJK punctuation
    {0x3030, 0x3098},    // Hiragana (without the combining sound marks)
    {0x309B, 0xA66E},    // Katakana, Bopomofo, CJK Ext-A, CJK Unified, Yi
    {0xABEE, 0xD7FF},    // Hangul syllables and Jamo Extended-B
    {0xFE30, 0xFFFD},    // CJK compatibility forms, half/full-width forms
    {0x1F000, 0x1FAFF},  // emoji and pictographs
    {0x20000, 0x2F7FF},  // CJK Ext-B .. Ext-F
};

bool nfc_inert(char32_t c) {
  for (const auto& r : kNfcInertRanges) {
    if (c < r.first) return false;
    if (c <= r.second) return true;
  }
  return false;
}

// The four ICU C entry points needed for NFC; the library is the system ICU,
// found by trying the sonames of recent major versions (symbols carry the
// major version as a suffix).
struct IcuNorm {
  using GetInstance = const void* (*)(int*);
  using GetDecomposition = int32_t (*)(const void*, int32_t, char16_t*, int32_t, int*);
  using GetCombiningClass = uint8_t (*)(const void*, int32_t);
  using ComposePair = int32_t (*)(const void*, int32_t, int32_t);
  using CharAge = void (*)(int32_t, uint8_t*);

  const void* nfc = nullptr;
  const void* nfd = nullptr;
  GetDecomposition get_decomposition = nullptr;
  GetCombiningClass get_ccc = nullptr;
  ComposePair compose_pair = nullptr;
  CharAge char_age = nullptr;
  std::string error;

  IcuNorm() {
    for (int major = 90; major >= 50 && nfc == nullptr; --major) {
      std::string soname = "libicuuc.so.";
      soname += std::to_string(major);
      void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib == nullptr) continue;
      const std::string ver = std::to_string(major);
      auto sym = [&](const char* name) {
        std::string full(name);
        full += '_';
        full += ver;
        return dlsym(lib, full.c_str());
      };
      auto get_nfc = reinterpret_cast<GetInstance>(sym("unorm2_getNFCInstance"));
      auto get_nfd = reinterpret_cast<GetInstance>(sym("unorm2_getNFDInstance"));
      get_decomposition = reinterpret_cast<GetDecomposition>(sym("unorm2_getDecomposition"));
      get_ccc = reinterpret_cast<GetCombiningClass>(sym("unorm2_getCombiningClass"));
      compose_pair = reinterpret_cast<ComposePair>(sym("unorm2_composePair"));
      char_age = reinterpret_cast<CharAge>(sym("u_charAge"));
      if (!get_nfc || !get_nfd || !get_decomposition || !get_ccc || !compose_pair || !char_age) {
        dlclose(lib);
        continue;
      }
      int e1 = 0, e2 = 0;
      const void* a = get_nfc(&e1);
      const void* b = get_nfd(&e2);
      if (e1 > 0 || e2 > 0 || a == nullptr || b == nullptr) {
        dlclose(lib);
        continue;
      }
      nfc = a;
      nfd = b;  // the library stays loaded for the process lifetime
    }
    if (nfc == nullptr) {
      error = "NFC normalisation of this text needs the ICU common library (libicuuc.so.N, N = 50..90) "
              "at run time, and none could be loaded; install libicu (e.g. Debian libicu72)";
    }
  }
};

// HF tokenizers' NFC (unicode-normalization-alignments) carries Unicode 9.0
// data: characters assigned later are unassigned there, i.e. class 0, no
// decomposition, no composition. Measured with tokenizers 0.23 (a combining
// mark from Unicode 10+ is not reordered); combining classes and canonical
// mappings never change once assigned, so filtering by age is exact.
constexpr uint8_t kHfUnicodeMajor = 9;

bool known_to_hf(const IcuNorm& u, char32_t c) {
  if (c < 0x0300) return true;  // all assigned since Unicode 1.1
  uint8_t v[4] = {0, 0, 0, 0};
  u.char_age(static_cast<int32_t>(c), v);
  return v[0] != 0 && (v[0] < kHfUnicodeMajor || (v[0] == kHfUnicodeMajor && v[1] == 0));
}

int ccc_of(const IcuNorm& u, char32_t c) {
  return known_to_hf(u, c) ? u.get_ccc(u.nfd, static_cast<int32_t>(c)) : 0;
}

const IcuNorm& icu() {
  static const IcuNorm inst;
  MAGI2_CHECK(inst.nfc != nullptr, inst.error);
  return inst;
}

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr int kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
              kSCount = kLCount * kNCount;

// Full canonical decomposition of one character (Hangul algorithmically).
void decompose(const IcuNorm& u, char32_t c, std::u32string& out) {
  if (c >= kSBase && c < kSBase + kSCount) {
    const int s = static_cast<int>(c - kSBase);
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (!known_to_hf(u, c)) {
    out.push_back(c);
    return;
  }
  char16_t buf[64];
  int err = 0;
  const int32_t n = u.get_decomposition(u.nfd, static_cast<int32_t>(c), buf, 64, &err);
  if (n < 0 || err > 0) {
    out.push_back(c);
    return;
  }
  for (int32_t i = 0; i < n; ++i) {
    char32_t cu = buf[i];
    if (cu >= 0xD800 && cu <= 0xDBFF && i + 1 < n) {
      cu = 0x10000 + ((cu - 0xD800) << 10) + (buf[i + 1] - 0xDC00);
      ++i;
    }
    out.push_back(cu);
  }
}

// Primary composite of a + b, or 0 when there is none.
char32_t compose(const IcuNorm& u, char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  if (!known_to_hf(u, a) || !known_to_hf(u, b)) return 0;
  const int32_t r = u.compose_pair(u.nfc, static_cast<int32_t>(a), static_cast<int32_t>(b));
  if (r < 0 || !known_to_hf(u, static_cast<char32_t>(r))) return 0;
  return static_cast<char32_t>(r);
}

// One character during normalisation with its HF-style "change": 0 = takes
// the place of one input character, +1 = inserted, -n = also absorbs n more.
struct Elem {
  char32_t c;
  int ccc;
  int64_t change;
};

}  // namespace

bool nfc_trivially_stable(std::u32string_view in) {
  return std::all_of(in.begin(), in.end(), nfc_inert);
}

NfcResult nfc_with_alignment_full(std::u32string_view in, int64_t base) {
  const IcuNorm& u = icu();
  // 1. full canonical decomposition, each piece remembering its source.
  std::vector<Elem> d;
  d.reserve(in.size() + 8);
  std::u32string tmp;
  for (size_t i = 0; i < in.size(); ++i) {
    tmp.clear();
    decompose(u, in[i], tmp);
    for (size_t k = 0; k < tmp.size(); ++k)
      d.push_back({tmp[k], ccc_of(u, tmp[k]), k == 0 ? 0 : 1});
  }
  // 2. canonical ordering: stable sort of every run of non-starters by class
  //    (the change markers travel with their characters).
  for (size_t i = 0; i < d.size();) {
    if (d[i].ccc == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && d[j].ccc != 0) ++j;
    std::stable_sort(d.begin() + i, d.begin() + j, [](const Elem& a, const Elem& b) { return a.ccc < b.ccc; });
    i = j;
  }
  // 3. canonical composition (UAX #15 "blocked" rule).
  std::vector<Elem> c;
  c.reserve(d.size());
  int64_t starter = -1;
  int last_ccc = -1;
  for (const Elem& e : d) {
    if (starter >= 0) {
      const bool unblocked = (last_ccc == 0 && static_cast<int64_t>(c.size()) - 1 == starter) ||
                             (last_ccc != 0 && last_ccc < e.ccc);
      if (unblocked) {
        if (char32_t p = compose(u, c[starter].c, e.c)) {
          c[starter].c = p;
          c[starter].change += e.change - 1;
          continue;
        }
      }
    }
    if (e.ccc == 0) starter = static_cast<int64_t>(c.size());
    last_ccc = e.ccc;
    c.push_back(e);
  }
  // 4. alignment in the HF transform convention (see header): a character that
  //    replaces input takes the alignment of the first input character it
  //    consumes; an inserted one shares that of the last consumed character.
  NfcResult r;
  r.text.reserve(c.size());
  r.align.reserve(c.size());
  const int64_t n = static_cast<int64_t>(in.size());
  int64_t consumed = 0;
  for (const Elem& e : c) {
    r.text.push_back(e.c);
    if (e.change > 0 || consumed >= n) {
      r.align.push_back(consumed > 0 ? CpRange(base + consumed - 1, base + consumed) : CpRange(base, base));
    } else {
      r.align.emplace_back(base + consumed, base + consumed + 1);
      consumed = std::min(n, consumed + 1 - e.change);
    }
  }
  return r;
}

NfcResult nfc_with_alignment(std::u32string_view in, int64_t base) {
  if (nfc_trivially_stable(in)) {
    NfcResult r;
    r.text.assign(in.begin(), in.end());
    r.align.reserve(in.size());
    for (size_t i = 0; i < in.size(); ++i) r.align.emplace_back(base + i, base + i + 1);
    return r;
  }
  return nfc_with_alignment_full(in, base);
}

}  // namespace magi2::qwen35
