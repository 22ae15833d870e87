// An fp32 wgmma accumulator turned into the e4m3 A operand of the next wgmma
// without a shuffle (FlashAttention-3's FP8 trick), shared by FP8 attention
// (S -> P, P V: attention_flash.cu) and the W8A8 fused routed experts
// (G, U -> Z, Z W_down: moe_expert_fused_fp8.cu). A thread's accumulator values
// of one 32-column slice and the k32 e4m3 A fragment that the same thread
// holds cover the same rows but different columns, so the A fragment keeps the
// accumulator's columns in their own order (p8_acc_index) and the B operand's
// k order follows it (fp8_vt_key: V^T's key columns, W_down^T's intermediate
// columns). The sum over k is the same. Device and constexpr host code.
#pragma once

#include <cstdint>

namespace magi2::cuda {

/// The column that position L of an FP8 B operand's k order holds (the key of
/// column L of a V^T tile row; the intermediate column of position L of a
/// W_down^T chunk): the order of the e4m3 A fragment's registers, where the A fragment's
/// keys 4t + u of each 16 (t = 0..3, u = 0..3) are the accumulator's keys
/// 2t + (u & 1) + 8 (u >> 1) (checked at compile time by p8_fragment_matches_vt).
__host__ __device__ constexpr int fp8_vt_key(int L) {
  const int w = L & 15, t = w >> 2, u = w & 3;
  return (L & ~15) | (2 * t + (u & 1) + 8 * (u >> 1));
}

// Four fp32 values -> their e4m3 bytes in one register (v0 the low byte), RNE, saturating.
__device__ __forceinline__ uint32_t e4m3x4_rn(float v0, float v1, float v2, float v3) {
  uint32_t r;
  asm("{\n .reg .b16 lo, hi;\n cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      " mov.b32 %0, {lo, hi};\n}"
      : "=r"(r)
      : "f"(v0), "f"(v1), "f"(v2), "f"(v3));
  return r;
}

// The accumulator value of S (flat index of the thread's fragment) that
// becomes value v (0..15) of k-step s of P's e4m3 A fragment. Register q =
// v / 4 of the k-step holds (row r, keys 4t..), (row r + 8, keys 4t..), then
// the same for the next 16 keys; byte v % 4 takes accumulator values
// {0, 1, 4, 5} (+ 2 for row r + 8, + 8 for the next 16 keys) of the k-step's 16.
__host__ __device__ constexpr int p8_acc_index(int s, int v) {
  const int q = v / 4, b = v % 4;
  return 16 * s + (q >= 2 ? 8 : 0) + (q % 2) * 2 + (b % 2) + 4 * (b / 2);
}

// Compile-time check that the A fragment needs no shuffle: for threads of every role and every value of
// P's A fragment (CuTe's ALayout, m + 64 k) the accumulator value
// p8_acc_index picks (CuTe's CLayout of S, m + 64 n) lies in the same row and
// at key 32 s + fp8_vt_key(k), the key V^T's column k holds.
template <class MmaS, class MmaO, int kBN>
constexpr bool p8_fragment_matches_vt() {
  using AL = typename MmaO::Atom::Traits::ALayout;
  using CL = typename MmaS::Atom::Traits::CLayout;
  // Lanes 0-3 span t = lane % 4; 4, 9, 31 the row groups; 32, 77, 127 other warps
  // (EDG's constexpr step limit does not allow all 128 threads).
  constexpr int kThreadsChecked[] = {0, 1, 2, 3, 4, 9, 31, 32, 77, 127};
  for (int thr : kThreadsChecked)
    for (int v = 0; v < 16; ++v) {
      const int a = static_cast<int>(AL{}(thr, v)), m = a % 64, k = a / 64;
      for (int s = 0; s < kBN / 32; ++s) {
        const int c = static_cast<int>(CL{}(thr, p8_acc_index(s, v)));
        if (c % 64 != m || c / 64 != 32 * s + fp8_vt_key(k)) return false;
      }
    }
  return true;
}

}  // namespace magi2::cuda
