#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine and builds magi2.cpp into ./build.
# Installs the Debian packages it needs (needs root or sudo). CUDA is built when
# nvcc is found (override: MAGI2_CUDA=ON|OFF). Usage: bash scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake ninja-build ccache pkg-config
          nlohmann-json3-dev libcli11-dev libfmt-dev libgtest-dev libgmock-dev libpcre2-dev libfftw3-dev libzip-dev
          libicu72   # ICU: loaded at run time by the tokenizer for NFC beyond its fast paths
          libpng-dev libjpeg62-turbo-dev libssl-dev libsndfile1-dev  # images (I2V input, PNG frames), SHA-256, WAV
          libcpp-httplib-dev  # HTTP(S): prompt enhancement client (OpenSSL), magi2 serve
          curl  # tests only: a client of magi2 serve
          libavformat-dev libavcodec-dev libavutil-dev libswscale-dev  # MP4 (optional in CMake)
          python3-pip  # pinned PyPI packages into .deps/ (cudnn-frontend headers)
          ffmpeg chromium  # tests only: ffprobe checks the MP4s, headless Chromium plays them
          openssl  # tests only: a self-signed certificate for the https prompt-enhancement test
          clang libclang-rt-14-dev libomp-14-dev)  # tests only: ASan/UBSan build + libFuzzer (scripts/hardening.sh)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Python packages for the tests only, pinned, into the git-ignored .deps/py
# (never system-wide): the official openai client drives `magi2 serve`.
py_pins=(openai==3.51.0)
if ! PYTHONPATH=.deps/py python3 -c "import openai, sys; sys.exit(openai.__version__ != '3.51.0')" 2>/dev/null; then
  echo "setup: installing ${py_pins[*]} into .deps/py"
  python3 -m pip install --quiet --disable-pip-version-check --target .deps/py --upgrade "${py_pins[@]}"
fi

# cudnn-frontend headers for the CUDA attention core (pinned wheel, headers only, git-ignored .deps/);
# without them the CUDA backend keeps its fp32 attention kernel.
fe_version=1.32.0
fe_dir=.deps/cudnn-frontend
if [ "${MAGI2_CUDA:-}" != OFF ] && [ -x /usr/local/cuda/bin/nvcc ] && ! grep -qsx "$fe_version" "$fe_dir/VERSION"; then
  rm -rf "$fe_dir"
  if python3 -m pip install -q --no-deps --disable-pip-version-check --target "$fe_dir" \
      "nvidia-cudnn-frontend==$fe_version"; then
    echo "$fe_version" > "$fe_dir/VERSION"
  else
    echo "setup: could not install nvidia-cudnn-frontend; CUDA attention will use its fp32 kernel" >&2
  fi
fi

cuda_flag=()
if [ -n "${MAGI2_CUDA:-}" ]; then
  cuda_flag=(-DMAGI2_CUDA="$MAGI2_CUDA")
elif [ -x /usr/local/cuda/bin/nvcc ]; then
  cuda_flag=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
fi
# CUTLASS headers for the CUDA routed experts (pinned wheel, headers only, git-ignored .deps/).
if [ "${MAGI2_CUDA:-}" != OFF ] && [ -x /usr/local/cuda/bin/nvcc ] && [ ! -f .deps/cutlass/cutlass_library/source/include/cutlass/cutlass.h ]; then
  python3 -m pip install --quiet --no-deps --target .deps/cutlass nvidia-cutlass==4.2.0.0
fi
jobs=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMAGI2_C_API=ON "${cuda_flag[@]}" >/dev/null
cmake --build build -j"$jobs"
echo "setup: built build/tools/magi2/magi2"
