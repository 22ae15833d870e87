// libFuzzer harness: every JSON config reader (MAGI-2 DiT, Qwen3.5 text
// encoder, TurboVAE, Stable Audio Open VAE) on the same text.
#include "core/error.h"
#include "fuzz_util.h"
#include "models/magi2_dit/config.h"
#include "models/oobleck/config.h"
#include "models/qwen35/text_config.h"
#include "models/turbovae/config.h"

namespace {

template <typename F>
void guarded(F&& f) {
  try {
    f();
  } catch (const magi2::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(magi2::fuzz::as_text(data, size));
  guarded([&] { (void)magi2::Magi2Config::from_json_text(text, "fuzz config.json").summary(); });
  guarded([&] { magi2::qwen35::TextConfig::from_json_text(text, "fuzz text config"); });
  guarded([&] { magi2::TurboVaeConfig::from_json_text(text, "fuzz turbo config"); });
  guarded([&] { magi2::SaoVaeConfig::from_json_text(text, "fuzz sao config"); });
  return 0;
}
