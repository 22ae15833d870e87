// FP8 attention as a measured experiment (issue 13 item 5; docs/fp8.md), not
// used by the engine: cuDNN 9's FP8 SDPA (e4m3 Q, K, V with per-tensor scales,
// fp32 softmax statistics, P quantised to e4m3 inside the kernel) against its
// bf16 SDPA on the same inputs, at the DiT's attention shapes: one CFG pair of
// 272p and 540p (2 samples, 24 heads x 128, non-causal, the stats the deferred
// sink needs). Prints the time, TFLOP/s (4 L^2 hd H per sample), a same-run
// cuBLASLt bf16 ceiling, and the FP8 output's rel-RMS error against the bf16
// output, for unit-variance logits and for peaked ones (Q x 4).
//
// Usage: bench_attention_fp8 [--reps N]
#include <cuda_runtime.h>
#include <cudnn.h>
#include <cudnn_frontend.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "cuda/backend_cuda.h"
#include "ops/numerics.h"
#include "ops/ops.h"

namespace magi2 {
namespace {

namespace fe = cudnn_frontend;

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDq, kDk, kDv, kDs, kSs, kSo, kAmaxS, kAmaxO };

void check_fe(fe::error_t e, const char* step) {
  if (e.is_bad()) throw Error(str_cat("cuDNN ", step, ": ", e.get_message()));
}

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(str_cat(what, ": ", cudaGetErrorString(e)));
}

/// Device buffer owned for the bench's lifetime.
struct DevBuf {
  void* p = nullptr;
  explicit DevBuf(size_t bytes) { check_cuda(cudaMalloc(&p, std::max<size_t>(bytes, 16)), "cudaMalloc"); }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
};

/// The shape of one bench: B samples of L tokens, H heads of hd.
struct Shape4 {
  int64_t b, h, s, d;
  std::vector<int64_t> dims() const { return {b, h, s, d}; }
  std::vector<int64_t> strides() const { return {s * h * d, d, h * d, 1}; }  // our [T, H, hd] rows
  int64_t numel() const { return b * h * s * d; }
};

std::shared_ptr<fe::graph::Tensor_attributes> scalar(fe::graph::Graph& g, const char* name, int64_t uid) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({1, 1, 1, 1}).set_stride(
      {1, 1, 1, 1}).set_data_type(fe::DataType_t::FLOAT));
}

/// Builds an SDPA graph: bf16 in and out (fp8 = false), or e4m3 in with the
/// output in `out_type`. Returns nullptr (and says why) when cuDNN refuses it.
std::shared_ptr<fe::graph::Graph> build(cudnnHandle_t handle, const Shape4& sh, float scale, bool fp8,
                                        fe::DataType_t out_type, int64_t& ws) {
  auto g = std::make_shared<fe::graph::Graph>();
  const fe::DataType_t io = fp8 ? fe::DataType_t::FP8_E4M3 : fe::DataType_t::BFLOAT16;
  g->set_io_data_type(io).set_intermediate_data_type(fe::DataType_t::FLOAT).set_compute_data_type(
      fe::DataType_t::FLOAT);
  auto x = [&](const char* name, int64_t uid) {
    return g->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(sh.dims()).set_stride(
        sh.strides()).set_data_type(io));
  };
  auto q = x("Q", kQ), k = x("K", kK), v = x("V", kV);
  auto opts = fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(true).set_attn_scale(scale);
  std::shared_ptr<fe::graph::Tensor_attributes> o, stats;
  if (fp8) {
    auto r = g->sdpa_fp8(q, k, v, scalar(*g, "descale_q", kDq), scalar(*g, "descale_k", kDk),
                         scalar(*g, "descale_v", kDv), scalar(*g, "descale_s", kDs), scalar(*g, "scale_s", kSs),
                         scalar(*g, "scale_o", kSo), opts);
    o = r[0], stats = r[1];
    r[2]->set_output(true).set_uid(kAmaxS).set_dim({1, 1, 1, 1}).set_stride({1, 1, 1, 1}).set_data_type(
        fe::DataType_t::FLOAT);
    r[3]->set_output(true).set_uid(kAmaxO).set_dim({1, 1, 1, 1}).set_stride({1, 1, 1, 1}).set_data_type(
        fe::DataType_t::FLOAT);
  } else {
    auto r = g->sdpa(q, k, v, opts);
    o = r[0], stats = r[1];
  }
  o->set_output(true).set_uid(kO).set_dim(sh.dims()).set_stride(sh.strides()).set_data_type(out_type);
  stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT).set_dim({sh.b, sh.h, sh.s, 1})
      .set_stride({sh.s * sh.h, 1, sh.h, 1});
  try {
    check_fe(g->validate(), "validate");
    check_fe(g->build_operation_graph(handle), "build_operation_graph");
    check_fe(g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), "create_execution_plans");
    check_fe(g->check_support(handle), "check_support");
    check_fe(g->build_plans(handle), "build_plans");
    check_fe(g->get_workspace_size(ws), "get_workspace_size");
  } catch (const Error& e) {
    std::printf("  (cuDNN refused the %s graph: %s)\n", fp8 ? "FP8" : "bf16", e.what());
    return nullptr;
  }
  return g;
}

/// Cheap deterministic uniform values in [-a, a) (unit variance for a = sqrt(3)).
void fill_uniform(std::vector<float>& v, uint64_t seed, float a) {
  uint64_t z = seed;
  for (float& x : v) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    x = a * (static_cast<float>((z >> 40) * 0x1p-24) * 2.f - 1.f);
  }
}

struct Inputs {
  std::vector<uint16_t> bf[3];  // q, k, v in bf16
  std::vector<uint8_t> f8[3];   // e4m3 of x / scale
  float scale[3];               // per-tensor: amax / 448
};

Inputs make_inputs(const Shape4& sh, float q_gain) {
  Inputs in;
  std::vector<float> f(static_cast<size_t>(sh.numel()));
  for (int i = 0; i < 3; ++i) {
    fill_uniform(f, 1234 + i, std::sqrt(3.f) * (i == 0 ? q_gain : 1.f));
    in.bf[i].resize(f.size());
    in.f8[i].resize(f.size());
    float amax = 0.f;
    for (size_t j = 0; j < f.size(); ++j) {
      in.bf[i][j] = f32_to_bf16_bits(f[j]);
      amax = std::max(amax, std::fabs(bf16_bits_to_f32(in.bf[i][j])));
    }
    in.scale[i] = amax > 0 ? amax / 448.f : 1.f;
    for (size_t j = 0; j < f.size(); ++j) in.f8[i][j] = f32_to_e4m3_bits(bf16_bits_to_f32(in.bf[i][j]) / in.scale[i]);
  }
  return in;
}

double median_ms(cudaStream_t s, int reps, const std::function<void()>& f) {
  for (int i = 0; i < 3; ++i) f();
  cudaEvent_t a, b;
  check_cuda(cudaEventCreate(&a), "event");
  check_cuda(cudaEventCreate(&b), "event");
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    check_cuda(cudaEventRecord(a, s), "record");
    f();
    check_cuda(cudaEventRecord(b, s), "record");
    check_cuda(cudaEventSynchronize(b), "sync");
    float t = 0;
    check_cuda(cudaEventElapsedTime(&t, a, b), "elapsed");
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void run_shape(cudnnHandle_t handle, cudaStream_t s, const char* name, const Shape4& sh, int reps, double ceil) {
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(sh.d)));
  const double flop = 4.0 * static_cast<double>(sh.s) * sh.s * sh.d * sh.h * sh.b;
  std::printf("\n%s: %lld samples x %lld tokens, %lld heads x %lld, %.3g GFLOP\n", name,
              static_cast<long long>(sh.b), static_cast<long long>(sh.s), static_cast<long long>(sh.h),
              static_cast<long long>(sh.d), flop * 1e-9);
  int64_t ws16 = 0, ws8 = 0, ws8b = 0;
  auto g16 = build(handle, sh, scale, false, fe::DataType_t::BFLOAT16, ws16);
  auto g8 = build(handle, sh, scale, true, fe::DataType_t::BFLOAT16, ws8);  // bf16 output where cuDNN allows it
  bool o_fp8 = false;
  if (!g8) {
    g8 = build(handle, sh, scale, true, fe::DataType_t::FP8_E4M3, ws8b);
    ws8 = ws8b;
    o_fp8 = true;
  }
  if (!g16 || !g8) return;
  const size_t n = static_cast<size_t>(sh.numel());
  DevBuf q16(n * 2), k16(n * 2), v16(n * 2), o16(n * 2), q8(n), k8(n), v8(n), o8(n * (o_fp8 ? 1 : 2));
  DevBuf st(static_cast<size_t>(sh.b * sh.h * sh.s) * 4), sc(8 * 4), w16(static_cast<size_t>(ws16)),
      w8(static_cast<size_t>(ws8));
  std::printf("| logits | what | ms | TFLOP/s | of ceiling | rel-RMS vs bf16 SDPA |\n|---|---|---:|---:|---:|---:|\n");
  for (float gain : {1.f, 4.f}) {
    const Inputs in = make_inputs(sh, gain);
    void* d16[3] = {q16.p, k16.p, v16.p};
    void* d8[3] = {q8.p, k8.p, v8.p};
    for (int i = 0; i < 3; ++i) {
      check_cuda(cudaMemcpy(d16[i], in.bf[i].data(), n * 2, cudaMemcpyHostToDevice), "upload");
      check_cuda(cudaMemcpy(d8[i], in.f8[i].data(), n, cudaMemcpyHostToDevice), "upload");
    }
    // descale_{q,k,v}: the per-tensor scales; S = softmax probabilities in [0, 1] scaled by 448
    // into e4m3; O either bf16 (scale 1) or e4m3 scaled by 448 / max|V|.
    const float vmax = in.scale[2] * 448.f;
    const float host_sc[8] = {in.scale[0], in.scale[1], in.scale[2], 1.f / 448.f, 448.f,
                              o_fp8 ? 448.f / vmax : 1.f, 0.f, 0.f};
    check_cuda(cudaMemcpy(sc.p, host_sc, sizeof host_sc, cudaMemcpyHostToDevice), "upload");
    float* scp = static_cast<float*>(sc.p);
    std::unordered_map<int64_t, void*> p16 = {{kQ, q16.p}, {kK, k16.p}, {kV, v16.p}, {kO, o16.p}, {kStats, st.p}};
    std::unordered_map<int64_t, void*> p8 = {{kQ, q8.p},       {kK, k8.p},       {kV, v8.p},       {kO, o8.p},
                                             {kStats, st.p},   {kDq, scp},       {kDk, scp + 1},   {kDv, scp + 2},
                                             {kDs, scp + 3},   {kSs, scp + 4},   {kSo, scp + 5},   {kAmaxS, scp + 6},
                                             {kAmaxO, scp + 7}};
    cudnnSetStream(handle, s);
    const double t16 = median_ms(s, reps, [&] { check_fe(g16->execute(handle, p16, w16.p), "execute bf16"); });
    const double t8 = median_ms(s, reps, [&] { check_fe(g8->execute(handle, p8, w8.p), "execute FP8"); });
    check_cuda(cudaStreamSynchronize(s), "sync");
    std::vector<uint16_t> a(n);
    check_cuda(cudaMemcpy(a.data(), o16.p, n * 2, cudaMemcpyDeviceToHost), "download");
    std::vector<float> b(n);
    if (o_fp8) {
      std::vector<uint8_t> r(n);
      check_cuda(cudaMemcpy(r.data(), o8.p, n, cudaMemcpyDeviceToHost), "download");
      for (size_t j = 0; j < n; ++j) b[j] = e4m3_bits_to_f32(r[j]) / host_sc[5];
    } else {
      std::vector<uint16_t> r(n);
      check_cuda(cudaMemcpy(r.data(), o8.p, n * 2, cudaMemcpyDeviceToHost), "download");
      for (size_t j = 0; j < n; ++j) b[j] = bf16_bits_to_f32(r[j]);
    }
    double num = 0, den = 0;
    for (size_t j = 0; j < n; ++j) {
      const double ref = bf16_bits_to_f32(a[j]), d = b[j] - ref;
      num += d * d;
      den += ref * ref;
    }
    const double tf16 = flop / t16 * 1e-9, tf8 = flop / t8 * 1e-9;
    const char* lg = gain == 1.f ? "unit" : "peaked (Q x 4)";
    std::printf("| %s | bf16 SDPA | %.3f | %.1f | %.3f | - |\n", lg, t16, tf16, tf16 / ceil);
    std::printf("| %s | FP8 SDPA (e4m3 Q/K/V/P, %s out) | %.3f | %.1f | %.3f | %.4f |\n", lg, o_fp8 ? "e4m3" : "bf16",
                t8, tf8, tf8 / ceil, std::sqrt(num / std::max(den, 1e-30)));
  }
}

int run(int argc, char** argv) {
  int reps = 10;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = std::max(1, std::atoi(argv[++i]));
    else
      throw Error(str_cat("bench_attention_fp8: unknown argument '", argv[i], "' (usage: bench_attention_fp8 [--reps N])"));
  }
  if (cuda_device_count() == 0) throw Error("bench_attention_fp8: no CUDA GPU present");
  auto be = make_cuda_backend(0);
  auto s = static_cast<cudaStream_t>(cuda_stream_of(*be));
  // Same-run ceiling: cuBLASLt bf16 8192^3 through the backend's linear.
  const int64_t m = 8192;
  Tensor x = be->alloc({m, m}, DType::BF16), w = be->alloc({m, m}, DType::BF16), y = be->alloc({m, m}, DType::BF16);
  check_cuda(cudaMemset(x.data(), 0x3c, static_cast<size_t>(m * m) * 2), "memset");  // bf16 0x3c3c = 0.0115
  check_cuda(cudaMemset(w.data(), 0x3c, static_cast<size_t>(m * m) * 2), "memset");
  const double tc = median_ms(s, reps, [&] { be->linear({.x = x, .w = w, .y = y, .groups = Groups::single(m)}); });
  const double ceil = 2.0 * m * m * m / tc * 1e-9;
  std::printf("ceiling: cuBLASLt bf16 GEMM 8192^3 %.3f ms, %.1f TFLOP/s; median of %d runs after 3 warm-ups\n", tc,
              ceil, reps);
  cudnnHandle_t handle = nullptr;
  if (cudnnCreate(&handle) != CUDNN_STATUS_SUCCESS) throw Error("cudnnCreate failed");
  run_shape(handle, s, "272p (one CFG pair)", {2, 24, 14936, 128}, reps, ceil);
  run_shape(handle, s, "540p (one CFG pair)", {2, 24, 57944, 128}, std::max(1, reps / 3), ceil);
  cudnnDestroy(handle);
  return 0;
}

}  // namespace
}  // namespace magi2

int main(int argc, char** argv) {
  try {
    return magi2::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
