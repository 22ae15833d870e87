// libFuzzer harness: the Qwen3.5 tokenizer. The first input byte picks the
// target: even = the rest encoded (and decoded) with the tiny model's
// tokenizer; odd = the rest loaded as a tokenizer.json, which then encodes a
// fixed sentence.
#include "core/error.h"
#include "fuzz_util.h"
#include "models/qwen35/tokenizer.h"
#include "engine/tiny_text_encoder.h"

namespace {

const magi2::qwen35::Tokenizer& tiny() {
  static const auto tok = magi2::qwen35::Tokenizer::from_json_text(
      magi2::tiny_tokenizer_json(), magi2::tiny_tokenizer_config_json(), true, "tiny tokenizer");
  return *tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest = magi2::fuzz::as_text(data + 1, size - 1);
  try {
    if (data[0] & 1) {
      const auto tok = magi2::qwen35::Tokenizer::from_json_text(rest, "", true, "fuzz tokenizer.json");
      const auto enc = tok->encode("A red fox trots through fresh snow at dawn. 狐狸 <Figure 1>");
      (void)tok->decode(enc.ids);
    } else {
      magi2::qwen35::EncodeOptions opt;
      opt.allow_empty = true;
      const auto enc = tiny().encode(rest, opt);
      (void)tiny().decode(enc.ids);
    }
  } catch (const magi2::Error&) {
  }
  return 0;
}
