// Argument pieces shared by the CUTLASS sm90 grouped GEMMs of the routed
// experts (moe_gemm.cuh: bf16; moe_fp8_gemm.cuh: FP8 blockwise-scaled): the
// hardware info of the current device and the linear-combination epilogue
// set to D = accumulator (alpha 1, beta 0, no per-group scalars). Include
// only after the CUTLASS headers, from .cu files.
#pragma once

#include <cutlass/cutlass.h>
#include <cutlass/kernel_hardware_info.h>

#include <cute/tensor.hpp>

#include "cuda/cuda_common.h"

namespace magi2::cuda {

/// SM count etc. of the current device for CUTLASS kernel `Kernel`'s tile scheduler.
template <class Kernel>
cutlass::KernelHardwareInfo current_device_hw_info() {
  int device = 0;
  MAGI2_CUDA_CHECK(cudaGetDevice(&device));
  return cutlass::KernelHardwareInfo::make_kernel_hardware_info<Kernel>(device);
}

/// Sets a linear-combination epilogue's arguments to D = accumulator: the
/// grouped expert GEMMs have no C operand and no per-group scaling.
template <class Fusion>
void set_plain_epilogue(Fusion& fusion) {
  fusion.alpha = 1.f;
  fusion.beta = 0.f;
  fusion.alpha_ptr = nullptr;
  fusion.beta_ptr = nullptr;
  fusion.alpha_ptr_array = nullptr;
  fusion.beta_ptr_array = nullptr;
  fusion.dAlpha = {cute::_0{}, cute::_0{}, 0};
  fusion.dBeta = {cute::_0{}, cute::_0{}, 0};
}

}  // namespace magi2::cuda
