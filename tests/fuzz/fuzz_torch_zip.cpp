// libFuzzer harness: a torch.save zip checkpoint (libzip archive, restricted
// unpickler, tensor records against their storages). The first input byte
// picks the target: even = the whole file through load_torch_checkpoint, odd
// = the rest as a bare data.pkl stream through the unpickler.
#include "core/error.h"
#include "fuzz_util.h"
#include "io/torch_pickle.h"
#include "io/torch_zip.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  try {
    if (data[0] & 1) {
      magi2::torch_pickle::parse(magi2::fuzz::as_text(data + 1, size - 1), "fuzz: data.pkl");
    } else {
      const std::string& path = magi2::fuzz::scratch_file(data + 1, size - 1, ".ckpt");
      for (const std::string& key : magi2::torch_checkpoint_keys(path)) (void)key;
      const magi2::TorchStateDict sd = magi2::load_torch_checkpoint(path);
      for (const auto& n : sd.names()) (void)sd.get(n).numel();
    }
  } catch (const magi2::Error&) {
  }
  return 0;
}
