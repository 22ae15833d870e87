// The CUDA backend's attention entry point: cuDNN 9 SDPA (flash attention on
// the tensor cores) through the header-only cudnn-frontend, the learned sink
// applied afterwards (spec magi2-dit.md §6 step 7, §6.1; docs/cuda.md).
//
// Layout: our [T, H, hd] bf16 buffers as they are, described to cuDNN as
// ragged THD: dims (B, H, max_seqlen, hd), strides (-, hd, H*hd, 1), one
// ragged offset per sample (cu[b] * H * hd elements) on Q, K, V and O, the
// padding mask with per-sample lengths. Stats (the fp32 natural-log LSE, no
// sink) are ragged too, strides (-, 1, H, 1): exactly our lse [T, H]. cuDNN
// writes o_fa = bf16(P V / l) once; the sink factor then multiplies that bf16
// value and rounds again: the official FA3 + correction rounding points.
//
// One plan per request shape (B, max_seqlen, T, H, hd, scale), built on its
// first call, which must be outside stream capture; the lengths and offsets
// are derived on the device from cu_seqlens (ragged_meta), so a captured step
// reads nothing on the host. Shapes cuDNN cannot take (or a failed plan
// build, reported once on stderr) run the fp32 kernel (attention.cu);
// CudaOptions::attention "fp32" (--cuda-attention fp32) forces it. Under
// "auto" the DiT's calls (lse given, head dim 128) take the own flash kernel
// (attention_flash.cu, measured faster than cuDNN's plans on the H200);
// "cudnn" keeps them on cuDNN. AttentionParams::fp8 (--attention-compute fp8)
// runs the flash kernel in FP8 (attention_fp8.cu) whatever the choice.
//
// The text encoder's causal GQA attention (causal_attention_cudnn) uses the
// same machinery: one sequence as ragged THD with the causal and padding
// masks, K/V with their own (fewer) heads, no stats; its plans are keyed by
// the length rounded up to a multiple of 256, the real length going in
// through the device seq_len / offset tensors (causal_meta), so a new prompt
// length rarely builds a plan.
#include "cuda/attention_flash.h"
#include "cuda/attn_ops.h"
#include "cuda/cuda_common.h"
#include "cuda/text_ops.h"

namespace magi2::cuda {
namespace {
// The own kernels' share of `attention` (with or without cuDNN in the build):
// true when attention_flash ran p, in FP8 (p.fp8, whatever `kernel`) or in
// bf16 (kAuto, for calls with the lse at head dim 128).
bool attention_own(const AttentionParams& p, const AttentionShape& a, cudaStream_t s, AttentionKernel kernel) {
  if (p.fp8) {
    attention_fp8(p, a, s);  // throws for a call without the lse or another head dim
    return true;
  }
  if (!p.lse.defined() || !attention_flash_supported(a.hd) || kernel != AttentionKernel::kAuto) return false;
  attention_flash(p, a, s);
  return true;
}
}  // namespace
}  // namespace magi2::cuda

#if MAGI2_HAVE_CUDNN

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace magi2::cuda {

namespace {

namespace fe = cudnn_frontend;

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kSeqQ, kSeqKv, kOffQ, kOffK, kOffV, kOffO, kOffStats };

using PlanKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, uint32_t>;  // B, s_max, T, H, hd, scale

/// A built cuDNN graph and the device buffers it runs with (owned for the process).
struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;
  void* workspace = nullptr;
  int32_t* seq = nullptr;       ///< [B] lengths
  int64_t* off_x = nullptr;     ///< [B+1] element offsets into q, k, v, o
  int64_t* off_s = nullptr;     ///< [B+1] element offsets into the stats
  float* stats = nullptr;       ///< [T, H] scratch when the caller applies no deferred sink
  ~Plan() {
    for (void* p : {workspace, static_cast<void*>(seq), static_cast<void*>(off_x), static_cast<void*>(off_s),
                    static_cast<void*>(stats)})
      if (p) cudaFree(p);  // errors ignored: may run at process exit
  }
};

/// A built causal GQA graph and its buffers (owned for the process).
struct CausalPlan {
  std::shared_ptr<fe::graph::Graph> graph;
  void* workspace = nullptr;
  int32_t* seq = nullptr;     ///< [1] the length
  int64_t* off_q = nullptr;   ///< [2] element offsets into q and o
  int64_t* off_kv = nullptr;  ///< [2] element offsets into k and v
  ~CausalPlan() {
    for (void* p : {workspace, static_cast<void*>(seq), static_cast<void*>(off_q), static_cast<void*>(off_kv)})
      if (p) cudaFree(p);
  }
};

using CausalKey = std::tuple<int64_t, int64_t, int64_t, int64_t, uint32_t>;  // s_max, H, Hkv, hd, scale

struct State {
  std::mutex mu;
  cudnnHandle_t handle = nullptr;
  std::map<PlanKey, std::unique_ptr<Plan>> plans;  // nullptr: cuDNN cannot run this shape
  std::map<CausalKey, std::unique_ptr<CausalPlan>> causal_plans;  // likewise
};

State& state() {
  static State* s = new State();  // never destroyed: no cuDNN calls during static destruction
  return *s;
}

// The tail of the errors of a plan missing at capture (cudaMalloc is not capturable).
constexpr const char* kBuiltBeforeCapture =
    " was built before stream capture (run one eager forward of this request shape first)";

void check_fe(fe::error_t e, const char* step) {
  if (e.is_bad()) throw Error(str_cat("cuDNN ", step, ": ", e.get_message()));
}

template <typename T>
T* device_alloc(size_t count) {
  void* p = nullptr;
  MAGI2_CUDA_CHECK(cudaMalloc(&p, count * sizeof(T) > 0 ? count * sizeof(T) : 16));
  return static_cast<T*>(p);
}

// A small device vector of the graph (lengths, ragged offsets): [n, 1, 1, 1].
std::shared_ptr<fe::graph::Tensor_attributes> index_tensor(fe::graph::Graph& g, const char* name, int64_t uid,
                                                           int64_t n, fe::DataType_t type) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({n, 1, 1, 1}).set_stride(
      {1, 1, 1, 1}).set_data_type(type));
}

// Validates the graph and builds its plans; returns the workspace bytes.
int64_t finish_graph(fe::graph::Graph& g, cudnnHandle_t handle) {
  check_fe(g.validate(), "validate");
  check_fe(g.build_operation_graph(handle), "build_operation_graph");
  check_fe(g.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), "create_execution_plans");
  check_fe(g.check_support(handle), "check_support");
  check_fe(g.build_plans(handle), "build_plans");
  int64_t ws = 0;
  check_fe(g.get_workspace_size(ws), "get_workspace_size");
  return ws;
}


// The SDPA graph of one request shape (ragged THD, padding mask, stats), not yet finished.
std::shared_ptr<fe::graph::Graph> sdpa_graph(const AttentionShape& a, float scale) {
  const int64_t b = a.nseq, h = a.h, s = a.max_len, d = a.hd;
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto index = [&](const char* name, int64_t uid, int64_t n, fe::DataType_t type) {
    return index_tensor(*g, name, uid, n, type);
  };
  const std::vector<int64_t> dims = {b, h, s, d}, strides = {s * h * d, d, h * d, 1};
  auto thd = [&](const char* name, int64_t uid, int64_t off_uid) {
    auto off = index("ragged_offset", off_uid, b + 1, fe::DataType_t::INT64);
    return g->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims).set_stride(strides)
                         .set_ragged_offset(off));
  };
  auto q = thd("Q", kQ, kOffQ), k = thd("K", kK, kOffK), v = thd("V", kV, kOffV);
  auto seq_q = index("seq_q", kSeqQ, b, fe::DataType_t::INT32);
  auto seq_kv = index("seq_kv", kSeqKv, b, fe::DataType_t::INT32);
  auto opts = fe::graph::SDPA_attributes()
                  .set_name("sdpa")
                  .set_generate_stats(true)
                  .set_attn_scale(scale)
                  .set_padding_mask(true)
                  .set_seq_len_q(seq_q)
                  .set_seq_len_kv(seq_kv);
  auto [o, stats] = g->sdpa(q, k, v, opts);
  o->set_output(true).set_uid(kO).set_dim(dims).set_stride(strides).set_ragged_offset(
      index("ragged_offset_o", kOffO, b + 1, fe::DataType_t::INT64));
  stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT).set_dim({b, h, s, 1})
      .set_stride({s * h, 1, h, 1}).set_ragged_offset(index("ragged_offset_stats", kOffStats, b + 1,
                                                            fe::DataType_t::INT64));
  return g;
}

std::unique_ptr<Plan> build_plan(cudnnHandle_t handle, const AttentionShape& a, float scale) {
  const int64_t b = a.nseq, h = a.h;
  auto g = sdpa_graph(a, scale);
  const int64_t ws = finish_graph(*g, handle);
  auto plan = std::make_unique<Plan>();
  plan->graph = g;
  plan->workspace = ws > 0 ? device_alloc<char>(static_cast<size_t>(ws)) : nullptr;
  plan->seq = device_alloc<int32_t>(b);
  plan->off_x = device_alloc<int64_t>(b + 1);
  plan->off_s = device_alloc<int64_t>(b + 1);
  plan->stats = device_alloc<float>(static_cast<size_t>(a.t * h));
  return plan;
}

// Creates the process's cuDNN handle on first use (the caller holds st.mu).
void ensure_handle(State& st) {
  if (!st.handle && cudnnCreate(&st.handle) != CUDNN_STATUS_SUCCESS) {
    st.handle = nullptr;
    throw Error("cudnnCreate failed");
  }
}

/// The plan for this shape, built now if new (outside capture only); nullptr
/// when cuDNN cannot run it.
Plan* plan_for(const AttentionShape& a, float scale, cudaStream_t s) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  uint32_t sb;
  std::memcpy(&sb, &scale, sizeof sb);
  const PlanKey key{a.nseq, a.max_len, a.t, a.h, a.hd, sb};
  auto it = st.plans.find(key);
  if (it != st.plans.end()) return it->second.get();
  check_not_capturing(s, "CUDA backend: attention: no cuDNN plan for B=", a.nseq, ", max_seqlen=", a.max_len,
                      ", T=", a.t, ", H=", a.h, ", hd=", a.hd, kBuiltBeforeCapture);
  std::unique_ptr<Plan> plan;
  try {
    ensure_handle(st);
    plan = build_plan(st.handle, a, scale);
  } catch (const Error& e) {
    std::fprintf(stderr, "magi2: cuDNN attention unavailable for B=%lld max_seqlen=%lld H=%lld hd=%lld (%s); "
                 "using the fp32 kernel\n", static_cast<long long>(a.nseq), static_cast<long long>(a.max_len),
                 static_cast<long long>(a.h), static_cast<long long>(a.hd), e.what());
  }
  return st.plans.emplace(key, std::move(plan)).first->second.get();
}

// One sequence of up to s_max tokens, ragged THD: q, o [1, H, s, hd] with token
// stride H hd, k, v [1, Hkv, s, hd] with token stride Hkv hd; causal (top-left)
// and padding masks, the length from the device seq tensor.
std::unique_ptr<CausalPlan> build_causal_plan(cudnnHandle_t handle, int64_t s_max, int64_t h, int64_t hkv, int64_t d,
                                              float scale) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto thd = [&](const char* name, int64_t uid, int64_t heads, int64_t off_uid) {
    auto off = index_tensor(*g, "ragged_offset", off_uid, 2, fe::DataType_t::INT64);
    return g->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({1, heads, s_max, d})
                         .set_stride({s_max * heads * d, d, heads * d, 1}).set_ragged_offset(off));
  };
  auto q = thd("Q", kQ, h, kOffQ), k = thd("K", kK, hkv, kOffK), v = thd("V", kV, hkv, kOffV);
  auto seq = index_tensor(*g, "seq", kSeqQ, 1, fe::DataType_t::INT32);
  auto seq_kv = index_tensor(*g, "seq_kv", kSeqKv, 1, fe::DataType_t::INT32);
  auto opts = fe::graph::SDPA_attributes()
                  .set_name("causal_sdpa")
                  .set_generate_stats(false)
                  .set_attn_scale(scale)
                  .set_causal_mask(true)
                  .set_padding_mask(true)
                  .set_seq_len_q(seq)
                  .set_seq_len_kv(seq_kv);
  auto [o, stats] = g->sdpa(q, k, v, opts);
  (void)stats;
  o->set_output(true).set_uid(kO).set_dim({1, h, s_max, d}).set_stride({s_max * h * d, d, h * d, 1})
      .set_ragged_offset(index_tensor(*g, "ragged_offset_o", kOffO, 2, fe::DataType_t::INT64));
  const int64_t ws = finish_graph(*g, handle);
  auto plan = std::make_unique<CausalPlan>();
  plan->graph = g;
  plan->workspace = ws > 0 ? device_alloc<char>(static_cast<size_t>(ws)) : nullptr;
  plan->seq = device_alloc<int32_t>(1);
  plan->off_q = device_alloc<int64_t>(2);
  plan->off_kv = device_alloc<int64_t>(2);
  return plan;
}

}  // namespace

bool causal_attention_cudnn(const CausalAttentionParams& p, int64_t t, int64_t h, int64_t hkv, int64_t hd,
                            cudaStream_t s) {
  const int64_t s_max = (t + 255) / 256 * 256;
  uint32_t sb;
  std::memcpy(&sb, &p.scale, sizeof sb);
  const CausalKey key{s_max, h, hkv, hd, sb};
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  auto it = st.causal_plans.find(key);
  if (it == st.causal_plans.end()) {
    check_not_capturing(s, "CUDA backend: causal_attention: no cuDNN plan for max length ", s_max, ", H=", h,
                        ", Hkv=", hkv, ", hd=", hd, kBuiltBeforeCapture);
    std::unique_ptr<CausalPlan> plan;
    try {
      ensure_handle(st);
      plan = build_causal_plan(st.handle, s_max, h, hkv, hd, p.scale);
    } catch (const Error& e) {
      std::fprintf(stderr, "magi2: cuDNN causal attention unavailable for max length %lld H=%lld Hkv=%lld hd=%lld (%s); "
                   "using our kernel\n", static_cast<long long>(s_max), static_cast<long long>(h),
                   static_cast<long long>(hkv), static_cast<long long>(hd), e.what());
    }
    it = st.causal_plans.emplace(key, std::move(plan)).first;
  }
  CausalPlan* plan = it->second.get();
  if (!plan) return false;
  causal_meta(t, h * hd, hkv * hd, plan->seq, plan->off_q, plan->off_kv, s);
  std::unordered_map<int64_t, void*> pack = {
      {kQ, p.q.data()},        {kK, p.k.data()},         {kV, p.v.data()},         {kO, p.o.data()},
      {kSeqQ, plan->seq},      {kSeqKv, plan->seq},      {kOffQ, plan->off_q},     {kOffK, plan->off_kv},
      {kOffV, plan->off_kv},   {kOffO, plan->off_q}};
  if (cudnnSetStream(st.handle, s) != CUDNN_STATUS_SUCCESS) throw Error("cuDNN: cudnnSetStream failed");
  check_fe(plan->graph->execute(st.handle, pack, plan->workspace), "execute");
  return true;
}

std::vector<std::pair<std::string, double>> cudnn_sdpa_plan_times(const AttentionParams& p, cudaStream_t s,
                                                                  int reps) {
  const AttentionShape a = check_attention(p);
  std::vector<std::pair<std::string, double>> out;
  if (a.t == 0 || a.h == 0 || a.max_len == 0 || !p.lse.defined()) return out;
  check_not_capturing(s, "CUDA backend: cudnn_sdpa_plan_times", kBuiltBeforeCapture);
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  ensure_handle(st);
  auto g = sdpa_graph(a, p.scale);
  check_fe(g->validate(), "validate");
  check_fe(g->build_operation_graph(st.handle), "build_operation_graph");
  check_fe(g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::B, fe::HeurMode_t::FALLBACK}),
           "create_execution_plans");
  check_fe(g->check_support(st.handle), "check_support");
  check_fe(g->build_plans(st.handle, fe::BuildPlanPolicy_t::ALL), "build_plans");
  const int64_t n = g->get_execution_plan_count();
  int64_t ws = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t w = 0;
    if (g->get_workspace_size_plan_at_index(i, w).is_good()) ws = std::max(ws, w);
  }
  Plan bufs;  // the buffers only (freed on return)
  bufs.workspace = ws > 0 ? device_alloc<char>(static_cast<size_t>(ws)) : nullptr;
  bufs.seq = device_alloc<int32_t>(a.nseq);
  bufs.off_x = device_alloc<int64_t>(a.nseq + 1);
  bufs.off_s = device_alloc<int64_t>(a.nseq + 1);
  ragged_meta(a.cu, a.nseq, a.h * a.hd, a.h, bufs.seq, bufs.off_x, bufs.off_s, s);
  std::unordered_map<int64_t, void*> pack = {
      {kQ, p.q.data()},     {kK, p.k.data()},      {kV, p.v.data()},       {kO, p.o.data()},
      {kStats, p.lse.data()}, {kSeqQ, bufs.seq},   {kSeqKv, bufs.seq},     {kOffQ, bufs.off_x},
      {kOffK, bufs.off_x},  {kOffV, bufs.off_x},   {kOffO, bufs.off_x},    {kOffStats, bufs.off_s}};
  if (cudnnSetStream(st.handle, s) != CUDNN_STATUS_SUCCESS) throw Error("cuDNN: cudnnSetStream failed");
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  MAGI2_CUDA_CHECK(cudaEventCreate(&e0));
  MAGI2_CUDA_CHECK(cudaEventCreate(&e1));
  for (int64_t i = 0; i < n; ++i) {
    std::string name;
    if (g->get_plan_name_at_index(i, name).is_bad()) name = str_cat("plan ", i);
    if (g->execute_plan_at_index(st.handle, pack, bufs.workspace, i).is_bad()) continue;  // warm-up
    std::vector<double> ms;
    for (int r = 0; r < reps; ++r) {
      MAGI2_CUDA_CHECK(cudaEventRecord(e0, s));
      const bool ok = g->execute_plan_at_index(st.handle, pack, bufs.workspace, i).is_good();
      MAGI2_CUDA_CHECK(cudaEventRecord(e1, s));
      MAGI2_CUDA_CHECK(cudaEventSynchronize(e1));
      float t = 0;
      MAGI2_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
      if (ok) ms.push_back(t);
    }
    if (ms.empty()) continue;
    std::sort(ms.begin(), ms.end());
    out.emplace_back(name, ms[ms.size() / 2]);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return out;
}

void attention(const AttentionParams& p, cudaStream_t s, AttentionKernel kernel) {
  const AttentionShape a = check_attention(p);
  if (a.t == 0 || a.h == 0 || a.max_len == 0) return;
  if (attention_own(p, a, s, kernel)) return;
  // cuDNN's flash forward takes head dims that are multiples of 8 up to 256 (Hopper).
  const bool fp32_only = kernel == AttentionKernel::kFp32;
  Plan* plan = (fp32_only || a.hd % 8 != 0 || a.hd > 256) ? nullptr : plan_for(a, p.scale, s);
  if (!plan) return attention_fp32(p, s);
  ragged_meta(a.cu, a.nseq, a.h * a.hd, a.h, plan->seq, plan->off_x, plan->off_s, s);
  float* stats = p.lse.defined() ? p.lse.data_as<float>() : plan->stats;
  std::unordered_map<int64_t, void*> pack = {
      {kQ, p.q.data()},      {kK, p.k.data()},       {kV, p.v.data()},        {kO, p.o.data()},
      {kStats, stats},       {kSeqQ, plan->seq},     {kSeqKv, plan->seq},     {kOffQ, plan->off_x},
      {kOffK, plan->off_x},  {kOffV, plan->off_x},   {kOffO, plan->off_x},    {kOffStats, plan->off_s}};
  State& st = state();
  {
    std::lock_guard<std::mutex> lock(st.mu);
    if (cudnnSetStream(st.handle, s) != CUDNN_STATUS_SUCCESS) throw Error("cuDNN: cudnnSetStream failed");
    check_fe(plan->graph->execute(st.handle, pack, plan->workspace), "execute");
  }
  if (!p.lse.defined()) sink_correct(p.o, stats, p.sinks.data_as<float>() + p.head_begin, s);
}

}  // namespace magi2::cuda

#else  // no cuDNN in this build: the fp32 kernel serves every call

namespace magi2::cuda {
void attention(const AttentionParams& p, cudaStream_t s, AttentionKernel kernel) {
  const AttentionShape a = check_attention(p);
  if (a.t == 0 || a.h == 0 || a.max_len == 0) return;
  if (attention_own(p, a, s, kernel)) return;
  attention_fp32(p, s);
}
std::vector<std::pair<std::string, double>> cudnn_sdpa_plan_times(const AttentionParams&, cudaStream_t, int) {
  return {};
}
bool causal_attention_cudnn(const CausalAttentionParams&, int64_t, int64_t, int64_t, int64_t, cudaStream_t) {
  return false;
}
}  // namespace magi2::cuda

#endif

#if !MAGI2_HAVE_CUTLASS  // attention_flash.cu needs the CUTLASS/CuTe headers
namespace magi2::cuda {
bool attention_flash_supported(int64_t) { return false; }
void attention_flash(const AttentionParams&, const AttentionShape&, cudaStream_t, FlashVariant) {
  throw Error("attention_flash: this build has no CUTLASS headers (scripts/setup.sh installs them)");
}
void attention_flash_fp8(const AttentionParams&, const AttentionShape&, const FlashFp8Operands&, cudaStream_t,
                         Fp8FlashVariant) {
  throw Error("attention_flash_fp8: this build has no CUTLASS headers (scripts/setup.sh installs them)");
}
}  // namespace magi2::cuda
#endif
