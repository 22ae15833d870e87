#!/usr/bin/env bash
# Builds a minimal static FFmpeg + x264 for the device run (docs/cuda.md "The
# device loop"): only what src/media/mp4.cpp uses (the libx264 and native AAC
# encoders, the mp4 muxer, the file protocol, libswscale), static PIC archives,
# no programs, no network, no hardware acceleration, no autodetected system
# libraries. magi2 linked against it writes MP4 with no libav*.so or libx264.so
# at run time, so the device bundle (64 MiB carry limit) stays small.
#
# Licence: x264 is GPL-2.0-or-later and FFmpeg is configured --enable-gpl, so a
# magi2 binary linked this way is GPL-licensed when distributed. It is meant for
# the device run only; the default build links the system's shared FFmpeg.
#
# Usage: bash scripts/ffmpeg_static.sh [PREFIX]
#   PREFIX  install folder (default: .deps/ffmpeg-static in this checkout, git-ignored)
#   MAGI2_FFMPEG_SRC   where sources are downloaded and built (default: PREFIX/../ffmpeg-static-src)
#   MAGI2_FFMPEG_JOBS  make -j (default 1)
# Then: PKG_CONFIG_PATH=PREFIX/lib/pkgconfig cmake ... -DMAGI2_WITH_FFMPEG=ON -DMAGI2_FFMPEG_STATIC=ON
#
# Sources: Debian 12 (bookworm) source packages, the versions of the system
# FFmpeg (7:5.1.9-0+deb12u1) and libx264 (2:0.164.3095+gitbaee400-3) the default
# build links, so both builds write the same bytes. The Debian patches are not
# applied (FFmpeg's one reverts a rangecoder change for FFV1, x264's one fixes
# x32 detection: neither touches what we use). Compiler flags follow Debian's
# (dpkg-buildflags' CFLAGS without -g): x264's configure lets them override its
# -O3, and x264 is built with -ffast-math, so -O2 vs -O3 can change its output.
# Needs: gcc, make, nasm (apt-get install nasm), pkg-config, curl or apt-get.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
prefix=${1:-$here/.deps/ffmpeg-static}
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
src=${MAGI2_FFMPEG_SRC:-$(dirname "$prefix")/ffmpeg-static-src}
jobs=${MAGI2_FFMPEG_JOBS:-1}

ffmpeg_ver=5.1.9
ffmpeg_tar=ffmpeg_${ffmpeg_ver}.orig.tar.xz
ffmpeg_sha=d9b593bb2ba93d4b50f74177e0cdcd41747e708596367deed0c30348a71dd176
x264_ver=0.164.3095+gitbaee400
x264_tar=x264_${x264_ver}.orig.tar.gz
x264_sha=8b237e94b08c196a1da22f2f25875f10be4cff3648df4eeff21e00da8f683fc2
mirror=${MAGI2_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# Debian's pool paths (the files stay there while bookworm ships these versions;
# snapshot.debian.org keeps them afterwards).
ffmpeg_url=$mirror/pool/main/f/ffmpeg/$ffmpeg_tar
x264_url=$mirror/pool/main/x/x264/$x264_tar
cflags="-O2 -fstack-protector-strong -Wformat -Werror=format-security"

libs=(libx264.a libavformat.a libavcodec.a libavutil.a libswscale.a)
have_all=1
for l in "${libs[@]}"; do [ -f "$prefix/lib/$l" ] || have_all=0; done
if [ $have_all = 1 ] && [ -f "$prefix/lib/pkgconfig/libavformat.pc" ] && [ -f "$prefix/.magi2-ffmpeg-static" ] &&
   [ "$(cat "$prefix/.magi2-ffmpeg-static")" = "ffmpeg $ffmpeg_ver x264 $x264_ver" ]; then
  echo "ffmpeg_static: $prefix already has FFmpeg $ffmpeg_ver + x264 $x264_ver"
  exit 0
fi
command -v nasm >/dev/null || { echo "ffmpeg_static: needs nasm (apt-get install nasm)" >&2; exit 1; }

mkdir -p "$src"
fetch() {  # fetch FILE URL SHA256
  local f=$src/$1
  if [ ! -f "$f" ] || ! echo "$3  $f" | sha256sum -c --status; then
    echo "ffmpeg_static: downloading $2"
    curl -fsSL -o "$f.part" "$2" || curl -fsSL -o "$f.part" "${2/\/debian\/pool\/main/\/debian-security\/pool\/updates\/main}"
    mv "$f.part" "$f"
  fi
  echo "$3  $f" | sha256sum -c --status || { echo "ffmpeg_static: sha256 mismatch for $f" >&2; exit 1; }
}
fetch "$x264_tar" "$x264_url" "$x264_sha"
fetch "$ffmpeg_tar" "$ffmpeg_url" "$ffmpeg_sha"

# x264: the static library alone, 8-bit 4:2:0 (all mp4.cpp encodes), with its asm.
rm -rf "$src/x264" && mkdir -p "$src/x264"
tar xzf "$src/$x264_tar" -C "$src/x264" --strip-components=1
(
  cd "$src/x264"
  CFLAGS="$cflags" ./configure --prefix="$prefix" --enable-static --enable-pic --disable-cli \
    --bit-depth=8 --chroma-format=420 --disable-opencl --disable-avs --disable-swscale --disable-lavf \
    --disable-ffms --disable-gpac --disable-lsmash
  make -j"$jobs"
  make install
)

# FFmpeg: libavformat, libavcodec, libavutil, libswscale; nothing autodetected.
rm -rf "$src/ffmpeg" && mkdir -p "$src/ffmpeg"
tar xJf "$src/$ffmpeg_tar" -C "$src/ffmpeg" --strip-components=1
(
  cd "$src/ffmpeg"
  PKG_CONFIG_PATH="$prefix/lib/pkgconfig" CFLAGS="$cflags" ./configure --prefix="$prefix" \
    --pkg-config-flags=--static --extra-version=magi2-static \
    --enable-static --disable-shared --enable-pic --enable-gpl --disable-autodetect \
    --disable-programs --disable-doc --disable-debug --disable-network \
    --disable-avdevice --disable-avfilter --disable-swresample --disable-postproc \
    --disable-everything --enable-libx264 --enable-encoder=libx264,aac \
    --enable-muxer=mp4 --enable-protocol=file
  make -j"$jobs"
  make install
)
echo "ffmpeg $ffmpeg_ver x264 $x264_ver" > "$prefix/.magi2-ffmpeg-static"
du -sh "$prefix/lib"/*.a
echo "ffmpeg_static: done; PKG_CONFIG_PATH=$prefix/lib/pkgconfig"
