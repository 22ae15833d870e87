// Times the DiT's dense linears on the CUDA backend at their release shapes
// (hidden 3072; qkv 3072 -> 9216, projections and split/merge 3072 -> 3072,
// shared expert fc1 3072 -> 2560 and fc2 1280 -> 3072, dense MLP 3072 -> 16384
// and 8192 -> 3072) over the 272p packing's rows: the bf16 cuBLASLt linear, the
// FP8 linear (`--linear-compute fp8`: quantiser + block-scaled GEMM; cuBLASLt,
// or CUTLASS with MAGI2_FP8_LINEAR_GEMM=cutlass) and its activation quantiser
// alone, next to a bf16 8192^3 GEMM and a device-to-device copy of the same
// run. Random data (timing only). Not a test: prints a markdown table
// (docs/perf.md). Usage: bench_linear [rows] (default 29872).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "cuda/backend_cuda.h"
#include "cuda/cuda_common.h"
#include "cuda/linear_fp8.h"
#include "ops/ops.h"

namespace magi2 {
namespace {

struct Shape2 {
  const char* name;
  int64_t in, out;
};

// A device tensor of `n` random bytes from `pick` (a host pattern of <= 16 MiB repeated).
template <typename Pick>
Tensor random_bytes(Backend& be, const Shape& shape, DType dt, Pick pick) {
  Tensor d = be.alloc(shape, dt);
  const int64_t n = d.nbytes(), chunk = std::min<int64_t>(n, int64_t{1} << 24);
  std::vector<uint8_t> host(static_cast<size_t>(chunk));
  for (int64_t i = 0; i < chunk; ++i) host[static_cast<size_t>(i)] = pick(i);
  for (int64_t o = 0; o < n; o += chunk)
    MAGI2_CUDA_CHECK(cudaMemcpy(static_cast<uint8_t*>(d.data()) + o, host.data(), std::min(chunk, n - o),
                                cudaMemcpyHostToDevice));
  return d;
}

int run(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 29872;
  std::unique_ptr<Backend> be = make_cuda_backend(0);
  void* s = cuda_stream_of(*be);
  std::mt19937 rng(7);
  // bf16 bytes of values in about [-2, 2] (exponent bytes 0x3e..0x40), e4m3 bytes without NaN.
  const auto bf16_byte = [&](int64_t i) { return static_cast<uint8_t>(i % 2 ? 0x3e + rng() % 3 : rng()); };
  const auto e4m3_byte = [&](int64_t) { return static_cast<uint8_t>(rng() % 0x7e | (rng() % 2) << 7); };
  const auto ms = [&](const std::function<void()>& f) { return cuda_median_ms(s, f, 11, 3); };

  double copy_gbs = 0, ceiling = 0;
  {
    Tensor a = be->alloc({16384, 32768}, DType::BF16), b = be->alloc({16384, 32768}, DType::BF16);
    be->zero(a);
    copy_gbs = 2.0 * static_cast<double>(a.nbytes()) / ms([&] { be->copy({.src = a, .dst = b}); }) * 1e-6;
    Tensor x = random_bytes(*be, {8192, 8192}, DType::BF16, bf16_byte);
    Tensor w = random_bytes(*be, {8192, 8192}, DType::BF16, bf16_byte), y = be->alloc({8192, 8192}, DType::BF16);
    ceiling = 2.0 * 8192.0 * 8192.0 * 8192.0 /
              ms([&] { be->linear({.x = x, .w = w, .y = y, .groups = Groups::single(8192)}); }) * 1e-9;
  }
  const char* gemm = std::getenv("MAGI2_FP8_LINEAR_GEMM");
  std::printf("bench_linear: %lld rows; ceilings: bf16 GEMM 8192^3 %.0f TFLOP/s, copy %.0f GB/s; FP8 GEMM: %s\n\n",
              static_cast<long long>(rows), ceiling, copy_gbs, gemm && *gemm ? gemm : "cublaslt (default)");
  std::printf("| linear | in -> out | bf16 ms (TFLOP/s) | FP8 ms (TFLOP/s) | quantiser ms (GB/s) | FP8 GEMM alone ms (TFLOP/s) |\n");
  std::printf("|---|---|---:|---:|---:|---:|\n");
  const Shape2 shapes[] = {{"qkv", 3072, 9216},        {"proj, split, merge", 3072, 3072},
                           {"shared fc1", 3072, 2560}, {"shared fc2", 1280, 3072},
                           {"dense up", 3072, 16384},  {"dense down", 8192, 3072}};
  for (const Shape2& sh : shapes) {
    const double flop = 2.0 * static_cast<double>(rows) * static_cast<double>(sh.in) * static_cast<double>(sh.out);
    Tensor x = random_bytes(*be, {rows, sh.in}, DType::BF16, bf16_byte);
    Tensor y = be->alloc({rows, sh.out}, DType::BF16);
    Tensor w = random_bytes(*be, {sh.out, sh.in}, DType::BF16, [&](int64_t i) {
      return static_cast<uint8_t>(i % 2 ? 0x3c + rng() % 2 : rng());  // ~[-0.03, 0.03]
    });
    const double t16 = ms([&] { be->linear({.x = x, .w = w, .y = y, .groups = Groups::single(rows)}); });
    Tensor w8 = random_bytes(*be, {sh.out, sh.in}, DType::F8E4M3, e4m3_byte);
    Tensor ws = be->alloc({1, sh.out / 128, sh.in / 128}, DType::F32);
    std::vector<float> ones(static_cast<size_t>(ws.numel()), 1.0f / 448);
    MAGI2_CUDA_CHECK(cudaMemcpy(ws.data(), ones.data(), ones.size() * 4, cudaMemcpyHostToDevice));
    const LinearParams p8{.x = x, .w = w8, .y = y, .groups = Groups::single(rows), .w_scale = ws};
    const double t8 = ms([&] { be->linear(p8); });
    Tensor q = be->alloc({rows, sh.in}, DType::U8), qs = be->alloc({rows, sh.in / 128}, DType::F32);
    const double tq = ms([&] {
      cuda::quantize_rows_fp8(x.data_as<uint16_t>(), sh.in, rows, sh.in, q.data_as<uint8_t>(), qs.data_as<float>(),
                              static_cast<cudaStream_t>(s));
    });
    const double qbytes = static_cast<double>(rows) * static_cast<double>(sh.in) * (2.0 + 1.0 + 4.0 / 128);
    std::printf("| %s | %lld -> %lld | %.3f (%.0f) | %.3f (%.0f) | %.3f (%.0f) | %.3f (%.0f) |\n", sh.name,
                static_cast<long long>(sh.in), static_cast<long long>(sh.out), t16, flop / t16 * 1e-9, t8,
                flop / t8 * 1e-9, tq, qbytes / tq * 1e-6, t8 - tq, flop / (t8 - tq) * 1e-9);
  }
  return 0;
}

}  // namespace
}  // namespace magi2

int main(int argc, char** argv) {
  try {
    return magi2::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_linear: %s\n", e.what());
    return 1;
  }
}
