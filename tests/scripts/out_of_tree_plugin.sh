#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The third-party route: install the SDK alone into a temporary prefix and
# use it as a plugin vendor would (tests/scripts/sdk_consumer.sh): build the
# example plugin it installs, from a copy, with find_package(LoomSDK) and
# with pkg-config, and have the in-tree `loom` list each build `ok` through
# LOOM_PLUGIN_PATH and open it by name; then -z defs, the ABI version
# variables and DLPack.
set -euo pipefail
src=$1 build=$2
tmp=$(mktemp -d /tmp/loom-oot-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
loom="$build/bin/loom"

cmake --install "$build" --prefix "$tmp/prefix" --component sdk >/dev/null
pc=$(dirname "$(find "$tmp/prefix" -name loom-sdk.pc | head -1)")
[[ -f "$pc/loom-sdk.pc" ]] || { echo "FAIL loom-sdk.pc was not installed"; exit 1; }
pluginsdir=$(PKG_CONFIG_PATH="$pc" pkg-config --variable=pluginsdir loom-sdk)
[[ "$pluginsdir" == "$tmp/prefix/"*"/loom/plugins" ]] || { echo "FAIL pluginsdir is $pluginsdir"; exit 1; }
# The installed example is the source tree's, file for file.
for f in README.md CMakeLists.txt Makefile selfonly_collective.c; do
  cmp -s "$src/examples/plugin-selfonly/$f" "$tmp/prefix/share/doc/loom-sdk-dev/examples/plugin-selfonly/$f" ||
    { echo "FAIL share/doc/loom-sdk-dev/examples/plugin-selfonly/$f is missing or differs from the source tree's"; exit 1; }
done
cmp -s "$src/sdk/README.md" "$tmp/prefix/share/doc/loom-sdk-dev/README.md" ||
  { echo "FAIL share/doc/loom-sdk-dev/README.md is missing or differs from sdk/README.md"; exit 1; }

# The example must pass the conformance suite too (built with the tests).
conformance=$build/bin/loom_conformance
[[ -x "$conformance" ]] || conformance=""
"$(dirname "$0")/sdk_consumer.sh" "$tmp/prefix" "$loom" "$src" ${conformance:+"$conformance"}
echo "out-of-tree plugin built from the installed example with find_package and with pkg-config, listed and opened"
