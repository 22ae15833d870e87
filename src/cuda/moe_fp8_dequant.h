// FP8 routed-expert banks to bf16 on the device (W8A16, docs/fp8.md): the
// values the CPU reference multiplies by. moe_fp8_dequant.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace magi2::cuda {

/// One bank of nf experts: q [nf, rows, cols] e4m3 bytes, scale [nf, ceil(rows / 128), ceil(cols / 128)]
/// f32 (one per 128 x 128 block), out [nf, rows, cols] bf16 bits.
struct Fp8Bank {
  const uint8_t* q = nullptr;
  const float* scale = nullptr;
  uint16_t* out = nullptr;
  int64_t rows = 0, cols = 0;
};

/// Enqueues out = bf16(e4m3(q) * scale) for up to 3 banks of nf experts on `s`,
/// one fp32 multiply and one round-to-nearest-even per element: the bytes of
/// ops/numerics.h fp8_dequant_f32 + f32_to_bf16. Banks whose rows and columns
/// are multiples of 128 (the release's 256 x 1280 and 1280 x 256) take the hardware conversion,
/// where a NaN (from a NaN byte or scale) becomes the canonical bf16 NaN (the
/// CPU keeps its sign; either way the expert's outputs are NaN); other widths
/// take the numerics header's conversion, NaNs included. Experts f with
/// offsets[f + 1] == offsets[f] (no routed rows) are skipped when `offsets` is
/// given (device int32 [nf + 1]). `blocks_per_bank` caps the grid (blocks of
/// 1024 threads, each striding over the bank): 0 fills the GPU; a small cap keeps
/// the pass on a few SMs while other work runs beside it. Errors: more than 3
/// banks, an empty or missing bank.
void fp8_dequant_banks(const Fp8Bank* banks, int nbanks, int64_t nf, const int32_t* offsets,
                       unsigned blocks_per_bank, cudaStream_t s);

}  // namespace magi2::cuda
