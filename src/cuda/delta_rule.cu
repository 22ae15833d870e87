// The Gated DeltaNet core of the Qwen3.5 linear-attention layers on the CUDA
// backend (GatedDeltaRuleParams), in its recurrent form (transformers
// torch_recurrent_gated_delta_rule), per value head h and token t:
//   S = exp(g_t) S;  kv = S^T k_t;  delta = beta_t (v_t - kv);  S += k_t delta^T;  o_t = S^T q_t
// with q, k L2-normalised in fp32 and q scaled by dk^-1/2, zero initial
// state. The CPU backend evaluates the same recurrence in chunks with the UT
// transform (the official torch_chunk_gated_delta_rule): equal in exact
// arithmetic, so the two differ by fp32 rounding only.
//
// Correctness first: one block per (value head, 32 value columns), 4 warps;
// lane l owns value column d0 + l and warp w the key rows [w R, (w+1) R) of
// the fp32 state slice, in registers (R = dk / 4). The block walks the tokens
// in order: per chunk of 16 tokens the normalised q, k, beta and exp(g) go to
// shared memory (one sync), then per token two syncs (the partial S^T k and
// S^T q of the 4 warps are summed in warp order). The gates and the norms are
// the CPU's operations (ops/text_numerics.h; the sum of squares in dot_f32's
// 16-lane order), so only the recurrence's own rounding differs.
#include <cmath>
#include <cstdint>

#include "cuda/cuda_common.h"
#include "cuda/device_fp.cuh"
#include "cuda/text_ops.h"
#include "ops/text_checks.h"
#include "ops/text_numerics.h"

namespace magi2::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kChunk = 16;  // tokens whose q, k, gates are prepared together

using dev::load_f32;
using dev::store_f32;

struct DeltaArgs {
  const void *q, *k, *v, *a, *b;
  int64_t ldq, ldk, ldv, lda, ldb;
  const float *a_log, *dt_bias;
  void* o;
  int64_t ldo;
  int64_t len, group, dk, dv;
  float qscale;
  bool bf;
};

template <typename T, int R>
__global__ void __launch_bounds__(kThreads) delta_rule_kernel(DeltaArgs p) {
  extern __shared__ float smem[];
  float* qn = smem;                    // [kChunk][dk] normalised, scaled q
  float* kn = qn + kChunk * p.dk;      // [kChunk][dk] normalised k
  float* beta = kn + kChunk * p.dk;    // [kChunk]
  float* decay = beta + kChunk;        // [kChunk] exp(g)
  float* part_kv = decay + kChunk;     // [kWarps][32]
  float* part_o = part_kv + kWarps * 32;  // [kWarps][32]

  const int h = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t kh = h / p.group, col = static_cast<int64_t>(blockIdx.y) * 32 + lane;
  const bool active = col < p.dv;
  const T* q = static_cast<const T*>(p.q);
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  const T* a = static_cast<const T*>(p.a);
  const T* b = static_cast<const T*>(p.b);
  T* o = static_cast<T*>(p.o);
  const float neg_a = -text_exp_f32(p.a_log[h]), dtb = p.dt_bias[h];

  float s[R];
#pragma unroll
  for (int j = 0; j < R; ++j) s[j] = 0.f;
  const int row0 = warp * R;

  for (int64_t c0 = 0; c0 < p.len; c0 += kChunk) {
    const int n = static_cast<int>(p.len - c0 < kChunk ? p.len - c0 : kChunk);
    // Prepare the chunk: warp w takes tokens w, w + 4, ...; lanes 0-15 norm q, lanes 16-31 norm k.
    for (int i = warp; i < n; i += kWarps) {
      const int64_t t = c0 + i;
      const bool is_k = lane >= 16;
      const T* src = is_k ? k + t * p.ldk + kh * p.dk : q + t * p.ldq + kh * p.dk;
      const float ss = dev::sum_squares16(src, p.dk);
      const float inv = 1.0f / sqrtf(__shfl_sync(0xffffffffu, ss, lane & 16) + 1e-6f);
      float* dst = (is_k ? kn : qn) + i * p.dk;
      for (int64_t e = lane & 15; e < p.dk; e += 16) {
        const float x = load_f32(src + e) * inv;
        dst[e] = is_k ? x : x * p.qscale;
      }
      if (lane == 0) {
        beta[i] = delta_beta(load_f32(b + t * p.ldb + h), p.bf);
        decay[i] = text_exp_f32(delta_log_decay(load_f32(a + t * p.lda + h), dtb, neg_a));
      }
    }
    __syncthreads();
    for (int i = 0; i < n; ++i) {
      const int64_t t = c0 + i;
      const float* kt = kn + i * p.dk + row0;
      const float* qt = qn + i * p.dk + row0;
      const float eg = decay[i];
      float acc = 0.f;
#pragma unroll
      for (int j = 0; j < R; ++j) {
        s[j] = s[j] * eg;
        acc += s[j] * kt[j];
      }
      part_kv[warp * 32 + lane] = acc;
      __syncthreads();
      float kv = 0.f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) kv += part_kv[w * 32 + lane];
      const float vt = active ? load_f32(v + t * p.ldv + h * p.dv + col) : 0.f;
      const float delta = (vt - kv) * beta[i];
      float out = 0.f;
#pragma unroll
      for (int j = 0; j < R; ++j) {
        s[j] = s[j] + kt[j] * delta;
        out += s[j] * qt[j];
      }
      part_o[warp * 32 + lane] = out;
      __syncthreads();
      if (warp == 0 && active) {
        float ot = 0.f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) ot += part_o[w * 32 + lane];
        store_f32(o + t * p.ldo + h * p.dv + col, ot);
      }
    }
    __syncthreads();  // the next chunk overwrites qn, kn, beta, decay
  }
}

template <typename T, int R>
void launch(const DeltaArgs& a, int64_t hv, cudaStream_t s) {
  const size_t smem = sizeof(float) * (2 * kChunk * a.dk + 2 * kChunk + 2 * kWarps * 32);
  const dim3 grid(static_cast<unsigned>(hv), static_cast<unsigned>((a.dv + 31) / 32));
  delta_rule_kernel<T, R><<<grid, kThreads, smem, s>>>(a);
}

template <typename T>
void launch_for_dk(const DeltaArgs& a, int64_t hv, cudaStream_t s) {
  switch (a.dk / kWarps) {
    case 2: return launch<T, 2>(a, hv, s);
    case 4: return launch<T, 4>(a, hv, s);
    case 8: return launch<T, 8>(a, hv, s);
    case 16: return launch<T, 16>(a, hv, s);
    case 32: return launch<T, 32>(a, hv, s);
    case 64: return launch<T, 64>(a, hv, s);
    default: break;
  }
}

}  // namespace

void gated_delta_rule(const GatedDeltaRuleParams& p, cudaStream_t s) {
  const DeltaRuleDims d = check_gated_delta_rule(p, Device::CUDA);
  MAGI2_CHECK(d.dk == 8 || d.dk == 16 || d.dk == 32 || d.dk == 64 || d.dk == 128 || d.dk == 256,
              "gated_delta_rule: the CUDA kernel takes key head dims 8, 16, 32, 64, 128 or 256, got ", d.dk);
  if (d.len == 0 || d.dv == 0) return;
  DeltaArgs a;
  a.q = p.q.data(), a.k = p.k.data(), a.v = p.v.data(), a.a = p.a.data(), a.b = p.b.data();
  a.ldq = p.q.row_stride(), a.ldk = p.k.row_stride(), a.ldv = p.v.row_stride();
  a.lda = p.a.row_stride(), a.ldb = p.b.row_stride();
  a.a_log = p.a_log.data_as<float>(), a.dt_bias = p.dt_bias.data_as<float>();
  a.o = p.o.data(), a.ldo = p.o.row_stride();
  a.len = d.len, a.group = d.hv / d.hk, a.dk = d.dk, a.dv = d.dv;
  a.qscale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.dk)));
  a.bf = p.q.dtype() == DType::BF16;
  if (a.bf)
    launch_for_dk<uint16_t>(a, d.hv, s);
  else
    launch_for_dk<float>(a, d.hv, s);
  MAGI2_CUDA_CHECK_LAUNCH("gated_delta_rule");
}

}  // namespace magi2::cuda
