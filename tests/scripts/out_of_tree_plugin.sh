#!/usr/bin/env bash
# The third-party route: install the SDK into a temporary prefix, build the
# example plugin against it with find_package(LoomSDK) and with pkg-config,
# then have the in-tree `loom` find each build through LOOM_PLUGIN_PATH, list
# it and open it by name.
set -euo pipefail
src=$1 build=$2
tmp=$(mktemp -d /tmp/loom-oot-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
loom="$build/bin/loom"
example="$src/examples/plugin-selfonly"

cmake --install "$build" --prefix "$tmp/prefix" --component sdk >/dev/null
pc=$(dirname "$(find "$tmp/prefix" -name loom-sdk.pc | head -1)")
[[ -f "$pc/loom-sdk.pc" ]] || { echo "FAIL loom-sdk.pc was not installed"; exit 1; }
pluginsdir=$(PKG_CONFIG_PATH="$pc" pkg-config --variable=pluginsdir loom-sdk)
[[ "$pluginsdir" == "$tmp/prefix/"*"/loom/plugins" ]] || { echo "FAIL pluginsdir is $pluginsdir"; exit 1; }

# 1. CMake package.
cmake -S "$example" -B "$tmp/cmake-build" -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_C_FLAGS="-Werror" >/dev/null
cmake --build "$tmp/cmake-build" >/dev/null
# 2. pkg-config.
mkdir -p "$tmp/pc-build"
make -s -C "$tmp/pc-build" -f "$example/Makefile" VPATH="$example" PKG_CONFIG_PATH="$pc" CFLAGS="-O2 -Wall -Wextra -Werror" >/dev/null

for dir in "$tmp/cmake-build" "$tmp/pc-build"; do
  so="$dir/libselfonly_collective.so"
  [[ -f "$so" ]] || { echo "FAIL not built: $so"; exit 1; }
  exports=$(nm -D --defined-only "$so" | awk '{print $NF}' | tr '\n' ' ')
  [[ "$exports" == "loom_collective_plugin_v1 " ]] || { echo "FAIL $so exports: $exports"; exit 1; }
  listing=$(LOOM_PLUGIN_PATH="$dir" "$loom" plugins)
  echo "$listing" | grep -E "^selfonly +collective +0\.1\.0 +1\.[0-9]+ +$so +ok$" >/dev/null ||
    { echo "FAIL not listed as ok:"; echo "$listing"; exit 1; }
  LOOM_PLUGIN_PATH="$dir" "$loom" plugins check selfonly
done
echo "out-of-tree plugin built with find_package and with pkg-config, listed and opened"
