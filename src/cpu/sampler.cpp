// CPU reference of the sampler ops (ops.h "Sampler ops"): the per-step work of
// the denoising loop around the DiT. The element formulas come from
// ops/numerics.h, which the CUDA kernels share, so both backends give the same bytes.
#include <cstring>
#include <limits>

#include "cpu/cpu_common.h"
#include "cpu/cpu_ops.h"
#include "ops/numerics.h"

namespace magi2::cpu {

namespace {

const float* f32_data(const Tensor& t, const char* what) {
  MAGI2_CHECK(t.defined() && t.device() == Device::CPU && t.dtype() == DType::F32 && t.is_contiguous(), what,
              ": expected a contiguous f32 CPU tensor");
  return t.data_as<float>();
}

int32_t read_step(const Tensor& step, int64_t rows, const char* what) {
  const int32_t s = *check_index_on(Device::CPU, step, 1, what);
  MAGI2_CHECK(s >= 0 && s < rows, what, ": step ", s, " is outside the table's ", rows, " rows");
  return s;
}

}  // namespace

void copy_elems(const CopyElemsParams& p) {
  const float* src = f32_data(p.src, "copy_elems.src");
  float* dst = const_cast<float*>(f32_data(p.dst, "copy_elems.dst"));
  MAGI2_CHECK(p.src_index.defined() || p.dst_index.defined() || p.src.numel() == p.dst.numel(),
              "copy_elems: identity copy between tensors of different sizes");
  const int64_t n = p.src_index.defined() ? p.src_index.numel() : (p.dst_index.defined() ? p.dst_index.numel()
                                                                                          : p.src.numel());
  const int32_t* si = p.src_index.defined() ? check_index_on(Device::CPU, p.src_index, n, "copy_elems.src_index") : nullptr;
  const int32_t* di = p.dst_index.defined() ? check_index_on(Device::CPU, p.dst_index, n, "copy_elems.dst_index") : nullptr;
  const int64_t ns = p.src.numel(), nd = p.dst.numel();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = si ? si[i] : i, d = di ? di[i] : i;
    MAGI2_CHECK(s >= 0 && s < ns && d >= 0 && d < nd, "copy_elems: element ", i, " maps ", s, " -> ", d,
                " outside src ", ns, " / dst ", nd);
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) dst[di ? di[i] : i] = src[si ? si[i] : i];
}

void fill_rows(const FillRowsParams& p) {
  const float* table = f32_data(p.table, "fill_rows.table");
  float* out = const_cast<float*>(f32_data(p.out, "fill_rows.out"));
  MAGI2_CHECK(p.table.dim() == 2 && p.out.dim() == 2 && p.table.size(1) == p.out.size(1),
              "fill_rows: table ", shape_str(p.table.shape()), " and out ", shape_str(p.out.shape()),
              " must be 2-D of one width");
  const int32_t s = read_step(p.step, p.table.size(0), "fill_rows.step");
  const int64_t c = p.out.size(1), n = p.rows.numel();
  const int32_t* rows = check_index_on(Device::CPU, p.rows, n, "fill_rows.rows");
  for (int64_t i = 0; i < n; ++i)
    MAGI2_CHECK(rows[i] >= 0 && rows[i] < p.out.size(0), "fill_rows: rows[", i, "] = ", rows[i], " is outside out");
  for (int64_t i = 0; i < n; ++i) std::memcpy(out + rows[i] * c, table + s * c, static_cast<size_t>(c) * 4);
}

void cfg_combine(const CfgCombineParams& p) {
  const float* pred = f32_data(p.pred, "cfg_combine.pred");
  float* v = const_cast<float*>(f32_data(p.v, "cfg_combine.v"));
  const int64_t n = p.v.numel();
  MAGI2_CHECK(p.pred.numel() == 2 * n, "cfg_combine: pred has ", p.pred.numel(), " elements, expected 2 x ", n);
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n; ++k) v[k] = cfg_combine_f32(pred[k], pred[n + k], p.scale);
}

void flow_unipc_step(const FlowUniPCStepParams& p) {
  float* x = const_cast<float*>(f32_data(p.sample, "flow_unipc_step.sample"));
  const float* v = f32_data(p.v, "flow_unipc_step.v");
  float* last = const_cast<float*>(f32_data(p.last, "flow_unipc_step.last"));
  float* m0 = const_cast<float*>(f32_data(p.m0, "flow_unipc_step.m0"));
  float* m1 = const_cast<float*>(f32_data(p.m1, "flow_unipc_step.m1"));
  const float* coef = f32_data(p.coef, "flow_unipc_step.coef");
  const int64_t n = p.sample.numel();
  for (const Tensor* t : {&p.v, &p.last, &p.m0, &p.m1})
    MAGI2_CHECK(t->numel() == n, "flow_unipc_step: state tensors must all have ", n, " elements");
  MAGI2_CHECK(p.coef.dim() == 2 && p.coef.size(1) == 16, "flow_unipc_step.coef: expected [S, 16] f32");
  const int32_t s = read_step(p.step, p.coef.size(0), "flow_unipc_step.step");
  UniPcStepCoef c;
  std::memcpy(static_cast<void*>(&c), coef + s * 16, sizeof(c));  // one [16] f32 row (static_assert in numerics.h)
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n; ++k) flow_unipc_element(c, v[k], x[k], last[k], m0[k], m1[k]);
}

void advance_step(const AdvanceStepParams& p) {
  int32_t* s = const_cast<int32_t*>(check_index_on(Device::CPU, p.step, 1, "advance_step.step"));
  ++*s;
}

void nonfinite_check(const NonfiniteCheckParams& p) {
  const float* x = f32_data(p.x, "nonfinite_check.x");
  MAGI2_CHECK(p.slot >= 0 && p.first.defined() && p.first.numel() > p.slot, "nonfinite_check: slot ", p.slot,
              " outside `first`");
  int32_t* first = const_cast<int32_t*>(check_index_on(Device::CPU, p.first, p.first.numel(), "nonfinite_check.first"));
  const int32_t s = *check_index_on(Device::CPU, p.step, 1, "nonfinite_check.step");
  const uint32_t* bits = reinterpret_cast<const uint32_t*>(x);
  bool bad = false;
  for (int64_t k = 0; k < p.x.numel() && !bad; ++k) bad = is_nonfinite_bits(bits[k]);
  if (bad && s < first[p.slot]) first[p.slot] = s;
}

}  // namespace magi2::cpu
