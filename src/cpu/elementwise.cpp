// Element-wise ops: SwiGLU7 (spec §4.3), row gather (§3.9), attention gate
// (§6 step 9), bf16 add, column copy (§3.8 time channels), casts.
#include <cstring>
#include <vector>

#include "cpu/cpu_common.h"
#include "cpu/cpu_ops.h"

namespace magi2::cpu {

void swiglu7(const SwiGLU7Params& p) {
  const int64_t rows = p.u.size(0), half = p.z.size(1);
  check_2d(p.u, rows, 2 * half, "swiglu7.u");
  check_2d(p.z, rows, half, "swiglu7.z");
  MAGI2_CHECK(p.u.dtype() == DType::BF16 && p.z.dtype() == DType::BF16, "swiglu7: u and z must be bf16");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* u = reinterpret_cast<const uint16_t*>(row_ptr(p.u, r));
    uint16_t* z = reinterpret_cast<uint16_t*>(row_ptr(p.z, r));
    for (int64_t i = 0; i < half; ++i) {
      z[i] = f32_to_bf16_bits(swiglu7_exact_f32(bf16_bits_to_f32(u[2 * i]), bf16_bits_to_f32(u[2 * i + 1])));
    }
  }
  if (p.z8.defined()) write_fp8_rows(p.z, p.z8, "swiglu7.z8");
}

void gather_rows(const GatherRowsParams& p) {
  MAGI2_CHECK(p.dst.defined() && p.dst.dim() == 2, "gather_rows.dst: expected a 2-D tensor");
  const int64_t rows = p.dst.size(0), cols = p.dst.size(1);
  const int32_t* index = check_index_on(Device::CPU, p.index, rows, "gather_rows.index");
  check_2d(p.src, p.src.size(0), cols, "gather_rows.src");
  check_2d(p.dst, rows, cols, "gather_rows.dst");
  MAGI2_CHECK(p.src.dtype() == p.dst.dtype(), "gather_rows: dtype mismatch");
  const size_t bytes = static_cast<size_t>(cols) * dtype_size(p.src.dtype());
  const int64_t src_rows = p.src.size(0);
  // Checked before the parallel loop: an exception must not escape an OpenMP region.
  for (int64_t r = 0; r < rows; ++r)
    MAGI2_CHECK(index[r] >= 0 && index[r] < src_rows, "gather_rows: index[", r, "] = ", index[r],
                " is outside the ", src_rows, " source rows");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) std::memcpy(row_ptr(p.dst, r), row_ptr(p.src, index[r]), bytes);
}

void gate(const GateParams& p) {
  const int64_t t = p.o.size(0), h = p.o.size(1), hd = p.o.size(2);
  MAGI2_CHECK(p.o.dtype() == DType::BF16 && p.o.is_contiguous(), "gate.o: expected contiguous bf16 [T, H, hd]");
  check_2d(p.g, t, h, "gate.g");
  MAGI2_CHECK(p.g.dtype() == DType::BF16, "gate.g: expected bf16");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < t; ++n) {
    const uint16_t* g = reinterpret_cast<const uint16_t*>(row_ptr(p.g, n));
    uint16_t* o = p.o.data_as<uint16_t>() + n * h * hd;
    for (int64_t k = 0; k < h; ++k) {
      const float s = round_bf16(sigmoid_f32(bf16_bits_to_f32(g[k])));
      for (int64_t i = 0; i < hd; ++i)
        o[k * hd + i] = f32_to_bf16_bits(bf16_bits_to_f32(o[k * hd + i]) * s);
    }
  }
}

void add(const AddParams& p) {
  const int64_t rows = p.out.size(0), cols = p.out.size(1);
  check_2d(p.a, rows, cols, "add.a");
  check_2d(p.b, rows, cols, "add.b");
  check_2d(p.out, rows, cols, "add.out");
  const DType dt = p.out.dtype();
  MAGI2_CHECK((dt == DType::BF16 || dt == DType::F32) && p.a.dtype() == dt && p.b.dtype() == dt,
              "add: expected all-bf16 or all-f32 operands");
  if (p.c.defined()) {
    check_2d(p.c, rows, cols, "add.c");
    MAGI2_CHECK(dt == DType::BF16 && p.c.dtype() == dt, "add.c: expected all-bf16 operands with a third term");
  }
  if (dt == DType::F32) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* a = reinterpret_cast<const float*>(row_ptr(p.a, r));
      const float* b = reinterpret_cast<const float*>(row_ptr(p.b, r));
      float* o = reinterpret_cast<float*>(row_ptr(p.out, r));
      for (int64_t i = 0; i < cols; ++i) o[i] = a[i] + b[i];
    }
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* a = reinterpret_cast<const uint16_t*>(row_ptr(p.a, r));
    const uint16_t* b = reinterpret_cast<const uint16_t*>(row_ptr(p.b, r));
    const uint16_t* c = p.c.defined() ? reinterpret_cast<const uint16_t*>(row_ptr(p.c, r)) : nullptr;
    uint16_t* o = reinterpret_cast<uint16_t*>(row_ptr(p.out, r));
    for (int64_t i = 0; i < cols; ++i) {
      const float bc = c ? round_bf16(bf16_bits_to_f32(b[i]) + bf16_bits_to_f32(c[i])) : bf16_bits_to_f32(b[i]);
      o[i] = f32_to_bf16_bits(bf16_bits_to_f32(a[i]) + bc);
    }
  }
}

void copy_cols(const CopyColsParams& p) {
  const int64_t rows = p.src.size(0), cols = p.src.size(1);
  check_2d(p.src, rows, cols, "copy_cols.src");
  MAGI2_CHECK(p.dst.dim() == 2 && p.dst.size(0) == rows && p.col_begin >= 0 &&
                  p.col_begin + cols <= p.dst.size(1),
              "copy_cols: destination ", shape_str(p.dst.shape()), " cannot take columns [", p.col_begin, ", ",
              p.col_begin + cols, ")");
  MAGI2_CHECK(p.src.dtype() == DType::F32 && p.dst.dtype() == DType::F32, "copy_cols: expected f32");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(reinterpret_cast<float*>(row_ptr(p.dst, r)) + p.col_begin, row_ptr(p.src, r),
                static_cast<size_t>(cols) * 4);
}

void cast(const CastParams& p) {
  const int64_t rows = p.dst.size(0), cols = p.dst.size(1);
  check_2d(p.src, rows, cols, "cast.src");
  check_2d(p.dst, rows, cols, "cast.dst");
  for (const Tensor* t : {&p.src, &p.dst})
    MAGI2_CHECK(t->dtype() == DType::BF16 || t->dtype() == DType::F32, t == &p.src ? "cast.src" : "cast.dst",
                ": expected bf16 or f32");
#pragma omp parallel
  {
    std::vector<float> buf(cols);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      load_row_f32(p.src, r, cols, buf.data());
      store_row(p.dst, r, cols, buf.data());
    }
  }
}

void copy(const CopyParams& p) {
  MAGI2_CHECK(p.src.defined() && p.dst.defined(), "copy: src or dst is missing");
  MAGI2_CHECK(p.src.device() == Device::CPU && p.dst.device() == Device::CPU,
              "copy: the CPU backend copies only between CPU tensors");
  MAGI2_CHECK(p.src.dtype() == p.dst.dtype() && p.src.shape() == p.dst.shape(), "copy: src ",
              shape_str(p.src.shape()), " ", dtype_name(p.src.dtype()), " does not match dst ",
              shape_str(p.dst.shape()), " ", dtype_name(p.dst.dtype()));
  if (p.src.is_contiguous() && p.dst.is_contiguous()) {
    std::memmove(p.dst.data(), p.src.data(), p.src.nbytes());
    return;
  }
  const int64_t rows = p.src.dim() == 2 ? p.src.size(0) : 0, cols = p.src.dim() == 2 ? p.src.size(1) : 0;
  check_2d(p.src, rows, cols, "copy.src");
  check_2d(p.dst, rows, cols, "copy.dst");
  const size_t bytes = static_cast<size_t>(cols) * dtype_size(p.src.dtype());
  for (int64_t r = 0; r < rows; ++r) std::memmove(row_ptr(p.dst, r), row_ptr(p.src, r), bytes);
}

}  // namespace magi2::cpu
