#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Prepares build-gpu-kit/, what tests/gpu/run.sh needs on a GPU machine that
# has PyTorch, CMake and a compiler but none of Debian's -dev packages and no
# network. Run it HERE, on a Debian 12 development machine with Loom's
# build dependencies installed:
#
#   tests/gpu/prepare.sh [KIT_DIR]     (default: build-gpu-kit in the repo root)
#
# The kit holds:
#   include/         headers of the header-only (or header-only-capable) libraries
#                    the core and the tests include: spdlog + fmt, nlohmann-json,
#                    CLI11, toml++, DLPack, zlib's two headers, and the part of
#                    Boost that Boost.DLL includes (used with std::filesystem,
#                    BOOST_DLL_USE_STD_FS, so no libboost_filesystem).
#   cmake/<Pkg>/     small CMake package files for those (INTERFACE targets named
#                    as Debian's: spdlog::spdlog, Boost::filesystem, ...): no
#                    compiled Debian library is linked into what run.sh builds.
#   src/googletest/  GoogleTest's sources (Debian's /usr/src/googletest), built there.
#   plugins/         libucx_collective.so and libcollab_strategy.so built here:
#                    plugins link neither libloom nor LibTorch (the C ABI), so
#                    Debian-built ones load into a loom built against pip torch.
#   plugins-nccl/    libnccl_collective.so built here against CUDA 13 + NCCL 2.28,
#                    used there only if that machine cannot build its own.
#   lib/, lib/ucx/   the shared libraries those plugins need beyond glibc,
#                    libstdc++ and CUDA/NCCL (UCX, OpenDHT and its closure), and
#                    UCX's transport modules.
#   data/            digits.csv.gz (Debian's python3-sklearn), for the digits task.
#   MANIFEST.txt     versions, sizes and the git revision it was made from.
# It ends by printing the `run` command (command line and carry list).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
kit=${1:-$root/build-gpu-kit}
# Where the carried plugins are built (a normal Debian 12 configure, plugins only).
pbuild=${LOOM_GPU_PLUGIN_BUILD:-$root/build-gpu-plugins}
multiarch=/usr/lib/x86_64-linux-gnu

say() { echo "prepare: $*"; }
die() { echo "prepare: $*" >&2; exit 1; }

case $kit in /*) ;; *) kit=$PWD/$kit ;; esac
case $kit in "$root"/*) ;; *) die "the kit must be inside the repository ($root) for the run tool's carry: $kit" ;; esac
kit_rel=${kit#"$root"/}
git -C "$root" check-ignore -q "$kit_rel/" || die "$kit_rel is not ignored by git (.gitignore ignores /build-*/): pick a build-* name"

for tool in dpkg-query g++ cmake ninja ldd strip; do
  command -v "$tool" >/dev/null || die "$tool is missing"
done
needed=(libspdlog-dev libfmt-dev nlohmann-json3-dev libcli11-dev libtomlplusplus-dev libdlpack-dev zlib1g-dev
        libboost-dev googletest libucx-dev libopendht-dev libsodium-dev python3-sklearn)
for pkg in "${needed[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" ||
    die "Debian package $pkg is not installed (apt-get install ${needed[*]})"
done

rm -rf "$kit"
mkdir -p "$kit"/{include,cmake,src,plugins,plugins-nccl,lib/ucx,data}

# --- 1. Headers -------------------------------------------------------------
# Every header a package puts under /usr/include, dereferenced (no symlinks in the kit).
copy_package_headers() {
  local pkg=$1 file
  while IFS= read -r file; do
    [[ -f $file && $file == /usr/include/* ]] || continue
    mkdir -p "$kit/include/$(dirname "${file#/usr/include/}")"
    cp -L "$file" "$kit/include/${file#/usr/include/}"
  done < <(dpkg -L "$pkg")
}
for pkg in libspdlog-dev libfmt-dev nlohmann-json3-dev libcli11-dev libtomlplusplus-dev libdlpack-dev; do
  copy_package_headers "$pkg"
done
cp -L /usr/include/zlib.h /usr/include/zconf.h "$kit/include/"

# Boost: what <boost/dll/*.hpp> includes with BOOST_DLL_USE_STD_FS, taken as
# whole sub-library folders (another compiler may take other branches of
# Boost.Config and Predef) plus the top-level headers it reaches (~3 MB of 100+).
probe=$(mktemp --suffix=.cpp)
trap 'rm -f "$probe"' EXIT
printf '#include <boost/dll/shared_library.hpp>\n#include <boost/dll/library_info.hpp>\nint main() {}\n' > "$probe"
mapfile -t boost_files < <(g++ -std=c++17 -DBOOST_DLL_USE_STD_FS -M "$probe" | tr ' \\' '\n\n' |
                           grep '^/usr/include/boost/' | sort -u)
((${#boost_files[@]} > 0)) || die "no Boost header found behind boost/dll"
mkdir -p "$kit/include/boost"
for f in "${boost_files[@]}"; do
  rel=${f#/usr/include/boost/}
  if [[ $rel == */* ]]; then
    sub=${rel%%/*}
    [[ -d $kit/include/boost/$sub ]] || cp -rL "/usr/include/boost/$sub" "$kit/include/boost/$sub"
  else
    cp -L "$f" "$kit/include/boost/$rel"
  fi
done
boost_version=$(sed -n 's/^#define BOOST_LIB_VERSION "\(.*\)"/\1/p' /usr/include/boost/version.hpp | tr _ .)

# --- 2. CMake package files -------------------------------------------------
# write_package NAME VERSION TARGET [DEFINES...]: <kit>/cmake/NAME/NAMEConfig.cmake
# defining TARGET as an INTERFACE target on the kit's headers. The kit's own
# path is found from the file's location, so the folder can move.
write_package() {
  local name=$1 version=$2 target=$3
  shift 3
  local dir=$kit/cmake/$name
  mkdir -p "$dir"
  cat > "$dir/${name}Config.cmake" <<EOF
# Written by tests/gpu/prepare.sh: $target from the GPU kit's headers (header-only use).
get_filename_component(_loom_kit_include "\${CMAKE_CURRENT_LIST_DIR}/../../include" ABSOLUTE)
if(NOT TARGET $target)
  add_library($target INTERFACE IMPORTED)
  set_target_properties($target PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "\${_loom_kit_include}"
                        INTERFACE_COMPILE_DEFINITIONS "$*")
endif()
set(${name}_FOUND TRUE)
EOF
  cat > "$dir/${name}ConfigVersion.cmake" <<EOF
set(PACKAGE_VERSION "$version")
if(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION STREQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
endif()
EOF
}
pkg_version() { dpkg-query -W -f='${Version}' "$1" | sed 's/^[0-9]*://; s/[-+~].*//'; }
# spdlog and fmt header-only (Debian builds them as libraries; their headers allow both).
write_package spdlog "$(pkg_version libspdlog-dev)" spdlog::spdlog "SPDLOG_FMT_EXTERNAL;FMT_HEADER_ONLY"
write_package nlohmann_json "$(pkg_version nlohmann-json3-dev)" nlohmann_json::nlohmann_json
write_package CLI11 "$(pkg_version libcli11-dev)" CLI11::CLI11
write_package tomlplusplus "$(pkg_version libtomlplusplus-dev)" tomlplusplus::tomlplusplus "TOML_HEADER_ONLY=1"
# Boost: Boost.DLL over std::filesystem; Boost::filesystem names that use here.
write_package Boost "$boost_version" Boost::filesystem "BOOST_DLL_USE_STD_FS"
cat >> "$kit/cmake/Boost/BoostConfig.cmake" <<'EOF'
if(NOT TARGET Boost::headers)
  add_library(Boost::headers INTERFACE IMPORTED)
  set_target_properties(Boost::headers PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_loom_kit_include}")
endif()
set(Boost_filesystem_FOUND TRUE)
set(Boost_headers_FOUND TRUE)
set(Boost_INCLUDE_DIRS "${_loom_kit_include}")
EOF

# --- 3. GoogleTest sources (built on the GPU machine by run.sh) ---------------
mkdir -p "$kit/src/googletest"
cp -L /usr/src/googletest/CMakeLists.txt "$kit/src/googletest/"
cp -rL /usr/src/googletest/googletest "$kit/src/googletest/googletest"

# --- 4. The carried plugins -------------------------------------------------
say "building the ucx, collab and nccl plugins in $pbuild"
nccl_args=()
[[ -d /usr/local/cuda ]] && nccl_args=(-DCUDAToolkit_ROOT=/usr/local/cuda)
cmake -S "$root" -B "$pbuild" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DLOOM_PLUGINS="ucx_collective;collab_strategy;nccl_collective" \
  -DLOOM_BUILD_TESTS=OFF -DLOOM_BUILD_BENCH=OFF "${nccl_args[@]}" > "$pbuild.configure.log" 2>&1 ||
  { tail -30 "$pbuild.configure.log" >&2; die "configuring the plugin build failed ($pbuild.configure.log)"; }
targets=(ucx_collective collab_strategy)
grep -q "nccl collective plugin: NCCL" "$pbuild.configure.log" && targets+=(nccl_collective)
cmake --build "$pbuild" --target "${targets[@]}" -- -j"${LOOM_GPU_JOBS:-$(nproc)}" > "$pbuild.build.log" 2>&1 ||
  { tail -30 "$pbuild.build.log" >&2; die "building the plugins failed ($pbuild.build.log)"; }
pdir=$pbuild/lib/plugins
cp "$pdir/libucx_collective.so" "$pdir/libcollab_strategy.so" "$kit/plugins/"
if [[ -f $pdir/libnccl_collective.so ]]; then
  cp "$pdir/libnccl_collective.so" "$kit/plugins-nccl/"
else
  say "no nccl plugin built here (no CUDA/NCCL): run.sh will have to build its own"
fi
# Without debug information they are a tenth of the size (the carry is limited).
strip --strip-debug "$kit"/plugins/*.so "$kit"/plugins-nccl/*.so 2>/dev/null || true

# --- 5. Their shared libraries ----------------------------------------------
# Left to the GPU machine: glibc, libstdc++/libgcc_s, zlib (Python needs it) and
# CUDA/NCCL (pip torch ships libcudart and libnccl). The rest is copied.
is_base_lib() {
  case $1 in
    linux-vdso* | ld-linux* | libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | libstdc++.so* | \
      libgcc_s.so* | libz.so* | libcudart.so* | libnccl.so* | libcuda.so*) return 0 ;;
  esac
  return 1
}
copy_closure() {  # copy_closure FILE: the non-base libraries ldd resolves for FILE
  local name path
  while read -r name _ path _; do
    is_base_lib "$name" && continue
    [[ $path == /* ]] || die "ldd cannot resolve $name for $1"
    [[ -f $kit/lib/$name ]] || cp -L "$path" "$kit/lib/$name"
  done < <(ldd "$1" | awk '$2 == "=>"')
}
for p in "$kit"/plugins/*.so; do copy_closure "$p"; done
# UCX's transport modules: cma (cross-memory attach) only; ib and rdmacm need
# RDMA libraries a single-machine check does not use. libucs looks in
# <its folder>/ucx; run.sh also sets UCX_MODULE_DIR.
ucx_modules=("$multiarch"/ucx/libuct_cma.so.0)
for m in "${ucx_modules[@]}"; do
  [[ -f $m ]] || continue
  cp -L "$m" "$kit/lib/ucx/"
  copy_closure "$m"
done

# --- 6. Data ----------------------------------------------------------------
cp -L /usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz "$kit/data/"

# --- 7. Manifest and the run command ----------------------------------------
size=$(du -sb "$kit" | cut -f1)
{
  echo "Loom GPU kit, made by tests/gpu/prepare.sh on $(hostname) at $(date -u +%FT%TZ)"
  echo "from git $(git -C "$root" rev-parse HEAD)$(git -C "$root" diff --quiet HEAD -- || echo ' (with uncommitted changes)')"
  echo "compiler: $(g++ --version | head -1); glibc: $(ldd --version | head -1 | awk '{print $NF}')"
  echo "size: $size bytes"
  echo
  echo "Debian packages behind it:"
  for pkg in "${needed[@]}" libucx0 libopendht2 libsodium23 libgnutls30; do
    dpkg-query -W -f='  ${Package} ${Version}\n' "$pkg" 2>/dev/null || true
  done
  echo
  echo "Files:"
  (cd "$kit" && find plugins plugins-nccl lib data -type f -printf '  %p %s\n' | sort)
} > "$kit/MANIFEST.txt"

(( size < 48 * 1024 * 1024 )) || die "the kit is $size bytes: too big for the run tool's 64 MiB carry"
say "kit ready: $kit ($((size / 1024)) KiB); manifest in $kit_rel/MANIFEST.txt"
cat <<EOF

Run it on the GPU machine with the run tool, from the repository root:
  command:   timeout 580 bash tests/gpu/run.sh --kit $kit_rel --logs "\$OUT"
  carry:     ["$kit_rel"]
  timeout_s: 600
EOF
