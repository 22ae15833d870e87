#include "media/sha256.h"

#include <openssl/evp.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace magi2 {
namespace {

// Incremental SHA-256 over OpenSSL's EVP interface (the low-level SHA256_* calls
// are deprecated in OpenSSL 3).
class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
    MAGI2_CHECK(ctx_ && EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) == 1,
                "sha256: OpenSSL digest initialisation failed");
  }
  void update(const void* data, size_t size) {
    MAGI2_CHECK(EVP_DigestUpdate(ctx_.get(), data, size) == 1, "sha256: OpenSSL digest update failed");
  }
  std::string hex() {
    std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
    unsigned int n = 0;
    MAGI2_CHECK(EVP_DigestFinal_ex(ctx_.get(), md.data(), &n) == 1 && n == 32,
                "sha256: OpenSSL digest finalisation failed");
    static const char* kHex = "0123456789abcdef";
    std::string s(64, '0');
    for (unsigned int i = 0; i < n; ++i) {
      s[2 * i] = kHex[md[i] >> 4];
      s[2 * i + 1] = kHex[md[i] & 15];
    }
    return s;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx_;
};

}  // namespace

std::string sha256_hex(const void* data, size_t size) {
  Sha256 h;
  h.update(data, size);
  return h.hex();
}

std::string sha256_file_hex(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  MAGI2_CHECK(f, "cannot read '", path, "': ", std::strerror(errno));
  Sha256 h;
  std::array<char, 1 << 16> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0) h.update(buf.data(), n);
  MAGI2_CHECK(!std::ferror(f.get()), "cannot read '", path, "': read error");
  return h.hex();
}

std::string tensor_sha256_hex(const Tensor& t) {
  MAGI2_CHECK(t.defined() && t.device() == Device::CPU && t.is_contiguous(),
              "sha256: needs a defined, contiguous CPU tensor");
  return sha256_hex(t.data(), t.nbytes());
}

ClipHashes clip_sha256(const Clip& clip) {
  check_frames(clip.frames, "sha256");
  ClipHashes r;
  r.video = tensor_sha256_hex(clip.frames);
  if (clip.audio.defined()) {
    check_audio(clip.audio, clip.sample_rate, "sha256");
    r.audio = tensor_sha256_hex(clip.audio);
  }
  return r;
}

}  // namespace magi2
