// Weight upload from mmap'd shards (src/cuda/upload.h through
// Backend::copy_many): tensors of a safetensors file reach the device byte for
// byte whether they are read with pread from the shard (inside a mapping) or
// copied from plain host memory, and the progress callback ends at the total.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "cuda/backend_cuda.h"
#include "io/safetensors.h"
#include "util/testing.h"

namespace magi2 {
namespace {

TEST(CudaUpload, ShardTensorsArriveExactlyWithProgress) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU present";
  auto gpu = make_cuda_backend(0);
  const std::string path = test::temp_dir("cuda_upload") + "/w.safetensors";
  // Sizes around the 32 MiB staging chunk and odd offsets inside the file.
  std::vector<std::pair<std::string, Tensor>> ts;
  for (int64_t n : {int64_t{3}, int64_t{1} << 20, (int64_t{33} << 20) / 4 + 5}) {
    Tensor t = Tensor::empty({n}, DType::F32);
    for (int64_t i = 0; i < n; ++i) t.data_as<float>()[i] = static_cast<float>(i % 977) * 0.5f + static_cast<float>(n);
    ts.emplace_back(str_cat("t", n), t);
  }
  write_safetensors(path, ts);
  auto f = SafetensorsFile::open(path);
  std::vector<CopyParams> copies;
  std::vector<Tensor> dev;
  size_t total = 0;
  for (const auto& [name, host] : ts) {
    const Tensor mapped = f->tensor(name);
    FileSpan span;
    ASSERT_TRUE(find_mapped_span(mapped.data(), mapped.nbytes(), &span));
    dev.push_back(gpu->alloc(mapped.shape(), mapped.dtype()));
    copies.push_back({.src = mapped, .dst = dev.back()});
    Tensor plain = host.clone();  // not in any mapping: the memcpy path
    dev.push_back(gpu->alloc(plain.shape(), plain.dtype()));
    copies.push_back({.src = plain, .dst = dev.back()});
    total += 2 * mapped.nbytes();
  }
  size_t last_done = 0, last_total = 0;
  gpu->copy_many(copies, [&](size_t done, size_t all) { last_done = done, last_total = all; });
  EXPECT_EQ(last_done, total);
  EXPECT_EQ(last_total, total);
  for (size_t i = 0; i < ts.size(); ++i)
    for (int k = 0; k < 2; ++k) {
      const Tensor back = to_host(*gpu, dev[2 * i + k]);
      EXPECT_EQ(std::memcmp(back.data(), ts[i].second.data(), back.nbytes()), 0) << ts[i].first << " path " << k;
    }
}

}  // namespace
}  // namespace magi2
