// libFuzzer harness: a safetensors file (header JSON, offsets, data section)
// opened and every tensor viewed and summed.
#include "core/error.h"
#include "fuzz_util.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = magi2::fuzz::scratch_file(data, size, ".safetensors");
  try {
    const auto f = magi2::SafetensorsFile::open(path);
    for (const auto& e : f->entries()) {
      const magi2::Tensor t = f->tensor(e.name);
      volatile unsigned char sink = 0;
      const auto* p = static_cast<const unsigned char*>(t.data());
      for (size_t i = 0; i < t.nbytes(); ++i) sink = sink ^ p[i];  // every byte must be readable
    }
  } catch (const magi2::Error&) {
  }
  return 0;
}
