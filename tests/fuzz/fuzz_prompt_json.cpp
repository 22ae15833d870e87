// libFuzzer harness: the prompt normaliser (Python json.loads semantics, the
// official compact-markdown renderer, the <Figure 1> insertion) on any text.
#include "core/error.h"
#include "fuzz_util.h"
#include "models/qwen35/prompt.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = magi2::fuzz::as_text(data, size);
  using magi2::qwen35::JsonPromptPolicy;
  for (JsonPromptPolicy policy : {JsonPromptPolicy::kOfficial, JsonPromptPolicy::kStrict}) {
    try {
      const std::string out = magi2::qwen35::normalize_prompt(text, policy);
      (void)magi2::qwen35::ensure_figure_token(out);
    } catch (const magi2::Error&) {
    }
  }
  return 0;
}
