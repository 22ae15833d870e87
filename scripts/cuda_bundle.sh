#!/usr/bin/env bash
# Packs CUDA test binaries and the shared libraries they need that the GPU
# machine's image lacks into one folder, for the `device` tool (docs/cuda.md).
#
# Usage: bash scripts/cuda_bundle.sh BUILD_DIR OUT_DIR [TARGET...]
#   BUILD_DIR  a CMake build with -DMAGI2_CUDA=ON (e.g. build-cuda)
#   OUT_DIR    folder to (re)create, inside the checkout the device tool sends,
#              git-ignored (e.g. /work/main/build-cuda-bundle: /build*/ is ignored)
#   TARGET     test executables to build and pack (default: test_cuda_backend)
# Then, with the device tool, from that checkout:
#   run(carry=["build-cuda-bundle"], command="cd build-cuda-bundle && ./run.sh ./test_cuda_backend")
#
# Left out on purpose: glibc (libc, libm, libdl, libpthread, librt, ld-linux),
# libstdc++ and libgcc_s (the device's Ubuntu 24.04 copies are newer and
# backward compatible), and the CUDA libraries (the driver's libcuda, and
# libcudart/libcublasLt/libnvrtc and cuDNN 9: the device image has CUDA 13 and
# cuDNN 9.19, and cuBLASLt alone is over 500 MB, far past the 64 MiB the tool
# carries). run.sh finds cuDNN in the CUDA folders or in a pip wheel's folder.
set -euo pipefail
build=${1:?usage: cuda_bundle.sh BUILD_DIR OUT_DIR [TARGET...]}
out=${2:?usage: cuda_bundle.sh BUILD_DIR OUT_DIR [TARGET...]}
shift 2
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(test_cuda_backend)

cmake --build "$build" -j2 --target "${targets[@]}"
rm -rf "$out"
mkdir -p "$out/lib"
skip='^(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux.*|libcuda|libcudart|libcublas|libcublasLt|libcudnn|libnvrtc|linux-vdso)\.so'
for t in "${targets[@]}"; do
  bin=$(find "$build" -type f -name "$t" -perm -u+x | head -n1)
  [ -n "$bin" ] || { echo "cuda_bundle: $t not found under $build" >&2; exit 1; }
  cp "$bin" "$out/"
  ldd "$bin" | awk '/=> \// {print $1, $3}' | while read -r name path; do
    if ! [[ $name =~ $skip ]]; then cp -L "$path" "$out/lib/$name"; fi
  done
done

# run.sh: finds the device's CUDA 13 libraries, then runs the given command.
cat > "$out/run.sh" <<'RUN'
#!/usr/bin/env bash
here=$(cd "$(dirname "$0")" && pwd)
cuda_libs=$(dirname "$(find /usr/local/cuda*/ /usr/lib /opt -name 'libcublasLt.so.13*' 2>/dev/null | head -n1)")
# cuDNN: a pip wheel's copy under /opt first (the H200 image's torch venv; its system copy in
# /usr/lib is older, 9.14 on 2026-12-01), else the CUDA or system folders.
cudnn=$(find /opt /usr/local/cuda*/ /usr/local/lib /usr/lib -name 'libcudnn.so.9*' 2>/dev/null | head -n1)
cudnn_libs=${cudnn:+$(dirname "$cudnn")}
export LD_LIBRARY_PATH="$here/lib:${cuda_libs}:/usr/local/cuda/lib64${cudnn_libs:+:$cudnn_libs}:${LD_LIBRARY_PATH:-}"
exec "$@"
RUN
chmod +x "$out/run.sh"
du -sh "$out"
ls -l "$out" "$out/lib"
