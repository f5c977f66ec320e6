#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What a plugin vendor does with an installed Loom SDK, from an empty folder:
# copy the example plugin the SDK installs with its documentation, build it
# with find_package(LoomSDK) and with pkg-config, and have `loom plugins`
# list each build `ok` through LOOM_PLUGIN_PATH. Then what the SDK promises:
#  - a plugin with an unresolved symbol fails to link through pkg-config
#    (-z defs), where without it the link passes and only the load fails;
#  - LoomSDK_ABI_VERSION_MAJOR/MINOR and pkg-config's abi_version are the
#    installed plugin.h's LOOM_ABI_MAJOR/MINOR, read when found (a changed
#    header changes them);
#  - a strategy, which includes loom/strategy.h and so <dlpack/dlpack.h>,
#    compiles with only the SDK's flags: LoomSDK puts the DLPack it found
#    (its CMake package, a folder, or LoomSDK_DLPACK_INCLUDE_DIR) on
#    Loom::sdk, refuses DLPack older than 0.6 and names libdlpack-dev when
#    there is none.
# Nothing here reads the source tree: SOURCE_DIR is only checked for absence
# from everything built.
#   tests/scripts/sdk_consumer.sh PREFIX LOOM SOURCE_DIR [CONFORMANCE]
# PREFIX: an installed (cmake --install --component sdk) or unpacked (dpkg -x
# of loom-sdk-dev, then PREFIX=<root>/usr) SDK; LOOM: the `loom` to list
# with; CONFORMANCE: a loom_conformance to run the example through.
set -euo pipefail
prefix=$(cd "$1" && pwd -P) loom=$(realpath "$2") src=$(cd "$3" && pwd -P) conformance=${4:-}
tmp=$(mktemp -d /tmp/loom-sdk-consumer-XXXXXX)
trap 'rm -rf "$tmp" "$tmp.out.log"' EXIT
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }
# (Its log lies outside $tmp: what a tool prints, such as the kit's test
# file names, is not something the builds wrote.)
quiet() { "$@" >"$tmp.out.log" 2>&1 || { cat "$tmp.out.log"; return 1; }; }
# said LOG TEXT: LOG holds TEXT, however CMake wrapped its lines.
said() { tr '\n' ' ' <"$1" | tr -s ' ' | grep -qF -- "$2"; }

doc=$prefix/share/doc/loom-sdk-dev
[[ -f "$doc/README.md" ]] || fail "no README.md in $doc"
[[ -f "$doc/examples/plugin-selfonly/selfonly_collective.c" ]] || { echo "FAIL no example plugin in $doc/examples"; exit 1; }
pc=$(find "$prefix" -name loom-sdk.pc -path '*/pkgconfig/*' | head -1)
[[ -n "$pc" ]] || { echo "FAIL no loom-sdk.pc under $prefix"; exit 1; }
PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_PATH
header=$prefix/include/loom/plugin.h
major=$(sed -n 's/^#define LOOM_ABI_MAJOR \([0-9]*\)$/\1/p' "$header")
minor=$(sed -n 's/^#define LOOM_ABI_MINOR \([0-9]*\)$/\1/p' "$header")
[[ -n "$major" && -n "$minor" ]] || { echo "FAIL no LOOM_ABI_MAJOR/MINOR in $header"; exit 1; }

# 1. The installed example, copied into an empty folder, built both ways.
cp -R "$doc/examples/plugin-selfonly" "$tmp/example"
chmod -R u+w "$tmp/example"
quiet cmake -S "$tmp/example" -B "$tmp/example/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_FLAGS="-Werror" ||
  fail "configuring the example with find_package(LoomSDK)"
quiet cmake --build "$tmp/example/build" || fail "building the example with CMake"
mkdir "$tmp/pc-build"
cp "$tmp/example/Makefile" "$tmp/example/selfonly_collective.c" "$tmp/pc-build/"
quiet make -C "$tmp/pc-build" CFLAGS="-O2 -Wall -Wextra -Werror" || fail "building the example with its Makefile (pkg-config)"
for dir in "$tmp/example/build" "$tmp/pc-build"; do
  so="$dir/libselfonly_collective.so"
  [[ -f "$so" ]] || { fail "not built: $so"; continue; }
  exports=$(nm -D --defined-only "$so" | awk '{print $NF}' | tr '\n' ' ')
  [[ "$exports" == "loom_collective_plugin_v1 " ]] || fail "$so exports: $exports"
  listing=$(LOOM_PLUGIN_PATH="$dir" "$loom" plugins 2>&1) || fail "loom plugins exited $? with LOOM_PLUGIN_PATH=$dir"
  echo "$listing" | grep -E "^selfonly +collective +0\.1\.0 +$major\.$minor +$so +ok$" >/dev/null ||
    { echo "$listing"; fail "$so is not listed as ok with ABI $major.$minor"; }
  quiet env LOOM_PLUGIN_PATH="$dir" "$loom" plugins check selfonly || fail "loom plugins check selfonly ($so)"
done
if [[ -n "$conformance" ]]; then
  quiet "$conformance" --plugin selfonly --plugin-path "$tmp/example/build" ||
    fail "the example does not pass the conformance suite ($conformance --plugin selfonly)"
fi
hits=$(grep -rlF -- "$src" "$tmp" 2>/dev/null || true)
[[ -z "$hits" ]] || fail "the out-of-tree builds name the source tree $src: ${hits//$tmp/}"

# 2. -z defs: an unresolved symbol fails the pkg-config link; without the
# .pc's flags the same link passes and Loom refuses the file at load time.
mkdir "$tmp/undefined"
cat >"$tmp/undefined/undefined.c" <<'EOF'
#include "loom/collective.h"
int loom_test_defined_nowhere(void);
LOOM_PLUGIN_EXPORT loom_status loom_collective_plugin_v1(const loom_negotiate_request *request,
                                                         loom_negotiate_reply *reply) {
  (void)request, (void)reply;
  return loom_test_defined_nowhere();
}
EOF
cd "$tmp/undefined"
read -ra cflags <<<"$(pkg-config --cflags loom-sdk)"
read -ra libs <<<"$(pkg-config --libs loom-sdk)"
[[ " ${libs[*]} " == *" -Wl,-z,defs "* ]] || fail "pkg-config --libs loom-sdk has no -Wl,-z,defs: ${libs[*]}"
if cc "${cflags[@]}" -fPIC -fvisibility=hidden -shared -o libundefined_collective.so undefined.c "${libs[@]}" \
     2>link.log; then
  fail "a plugin with an undefined symbol linked with pkg-config's flags"
elif ! grep -q "undefined reference to .loom_test_defined_nowhere" link.log; then
  cat link.log
  fail "the pkg-config link failed, but not for the undefined symbol"
fi
cc "${cflags[@]}" -fPIC -fvisibility=hidden -shared -o libundefined_collective.so undefined.c \
   -Wl,--version-script="$(pkg-config --variable=versionmap loom-sdk)" ||
  fail "without -z defs the same plugin did not link (so the test above proves nothing)"
listing=$(LOOM_PLUGIN_PATH="$tmp/undefined" "$loom" plugins 2>&1) || true
echo "$listing" | grep -E "^undefined +collective .*broken: cannot be loaded: .*undefined symbol: loom_test_defined_nowhere" \
  >/dev/null || { echo "$listing"; fail "the plugin linked without -z defs is not listed as broken for its symbol"; }
cd "$tmp"

# 3. The ABI version, from the installed header at find time.
[[ "$(pkg-config --variable=abi_version loom-sdk)" == "$major.$minor" ]] ||
  fail "pkg-config abi_version is $(pkg-config --variable=abi_version loom-sdk), plugin.h says $major.$minor"
mkdir "$tmp/abi"
cat >"$tmp/abi/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.16)
project(loom_abi_probe LANGUAGES C)
find_package(LoomSDK REQUIRED)
message(STATUS "abi=${LoomSDK_ABI_VERSION_MAJOR} ${LoomSDK_ABI_VERSION_MINOR} ${LoomSDK_ABI_VERSION}")
EOF
abi_of() {  # abi_of PREFIX: what find_package(LoomSDK) says
  rm -rf "$tmp/abi/build"
  cmake -S "$tmp/abi" -B "$tmp/abi/build" -DCMAKE_PREFIX_PATH="$1" 2>&1 | sed -n 's/^-- abi=//p' || true
}
got=$(abi_of "$prefix")
[[ "$got" == "$major $minor $major.$minor" ]] || fail "find_package(LoomSDK) gives ABI '$got', plugin.h $major.$minor"
# A copy of the SDK whose plugin.h says another minor: the variables follow it.
mkdir "$tmp/changed"
cp -R "$prefix/include" "$tmp/changed/include"
cp -R "$prefix/lib" "$tmp/changed/lib"
sed -i "s/^#define LOOM_ABI_MINOR $minor\$/#define LOOM_ABI_MINOR 4242/" "$tmp/changed/include/loom/plugin.h"
got=$(abi_of "$tmp/changed")
[[ "$got" == "$major 4242 $major.4242" ]] || fail "with LOOM_ABI_MINOR 4242 in plugin.h find_package(LoomSDK) gives '$got'"
rm -rf "$tmp/changed"

# 4. DLPack. A strategy compiles with the SDK's flags alone: pkg-config's,
# then CMake's with each way LoomSDK finds DLPack. A marked copy of the
# system's dlpack.h stands in for a DLPack outside the compiler's own path
# (the system's is in /usr/include, which the compiler searches anyway):
# the marker proves the copy LoomSDK found is the one compiled against.
system_dlpack=$(pkg-config --variable=dlpack_includedir loom-sdk)
[[ -f "$system_dlpack/dlpack/dlpack.h" ]] || fail "pkg-config's dlpack_includedir $system_dlpack has no dlpack/dlpack.h"
mkdir -p "$tmp/strategy"
cat >"$tmp/strategy/probe_strategy.c" <<'EOF'
/* A strategy-like source: it includes loom/strategy.h and uses DLPack's types. */
#include "loom/strategy.h"
#if defined(EXPECT_MARKED_DLPACK) && !defined(LOOM_TEST_MARKED_DLPACK)
#error "compiled against another DLPack than the one the SDK found"
#endif
static int32_t on_device(const loom_training_state_v1 *state) {
  return state->device.device_type == kDLCUDA && state->grads[0].ndim > 0;
}
LOOM_PLUGIN_EXPORT loom_status loom_strategy_plugin_v1(const loom_negotiate_request *request,
                                                       loom_negotiate_reply *reply) {
  (void)request;
  (void)on_device;
  reply->refusal = "probe only";
  return LOOM_ERR_UNSUPPORTED;
}
EOF
cc -std=c99 -pedantic -Wall -Wextra -Werror "${cflags[@]}" -c -o "$tmp/strategy/probe.o" \
  "$tmp/strategy/probe_strategy.c" || fail "a strategy does not compile with pkg-config --cflags loom-sdk"
cat >"$tmp/strategy/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.16)
project(loom_strategy_probe LANGUAGES C)
find_package(LoomSDK REQUIRED)
message(STATUS "dlpack=${LoomSDK_DLPACK_VERSION} ${LoomSDK_DLPACK_INCLUDE_DIR}")
loom_sdk_add_plugin(probe strategy probe_strategy.c)
set_target_properties(probe_strategy PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
EOF
strategy_build() {  # strategy_build NAME CMAKE_ARGS...: configure and build the probe
  local name=$1
  shift
  cmake -S "$tmp/strategy" -B "$tmp/strategy/$name" -DCMAKE_C_FLAGS="-Werror -pedantic" "$@" >"$tmp/strategy/$name.log" 2>&1 &&
    cmake --build "$tmp/strategy/$name" >>"$tmp/strategy/$name.log" 2>&1
}
strategy_build system -DCMAKE_PREFIX_PATH="$prefix" || { cat "$tmp/strategy/system.log"; fail "a strategy does not build with find_package(LoomSDK)"; }
# A marked DLPack with a CMake package of its own, as libdlpack-dev installs one.
marked=$tmp/dlpack-marked
mkdir -p "$marked/include/dlpack"
{ echo '#define LOOM_TEST_MARKED_DLPACK 1'; cat "$system_dlpack/dlpack/dlpack.h"; } >"$marked/include/dlpack/dlpack.h"
mkdir -p "$marked/lib/cmake/dlpack"
cat >"$marked/lib/cmake/dlpack/dlpackConfig.cmake" <<'EOF'
if(NOT TARGET dlpack::dlpack)
  add_library(dlpack::dlpack INTERFACE IMPORTED)
  set_target_properties(dlpack::dlpack PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${CMAKE_CURRENT_LIST_DIR}/../../../include")
endif()
EOF
strategy_build package -DCMAKE_PREFIX_PATH="$marked;$prefix" -DCMAKE_C_FLAGS="-DEXPECT_MARKED_DLPACK -Werror -pedantic" ||
  { cat "$tmp/strategy/package.log"; fail "a strategy does not build against the DLPack that dlpack's CMake package names"; }
# The same headers named outright.
rm -rf "${marked:?}/lib"
strategy_build named -DCMAKE_PREFIX_PATH="$prefix" -DLoomSDK_DLPACK_INCLUDE_DIR="$marked/include" \
  -DCMAKE_C_FLAGS="-DEXPECT_MARKED_DLPACK -Werror -pedantic" ||
  { cat "$tmp/strategy/named.log"; fail "a strategy does not build against LoomSDK_DLPACK_INCLUDE_DIR"; }
# DLPack 0.5 is refused, naming the version and the package.
# (0.x headers say DLPACK_VERSION, 1.x ones DLPACK_MAJOR_VERSION and
# DLPACK_MINOR_VERSION: whichever this system has becomes 0.5.)
sed -i -e 's/^#define DLPACK_VERSION .*/#define DLPACK_VERSION 050/' \
       -e 's/^#define DLPACK_MAJOR_VERSION .*/#define DLPACK_MAJOR_VERSION 0/' \
       -e 's/^#define DLPACK_MINOR_VERSION .*/#define DLPACK_MINOR_VERSION 5/' "$marked/include/dlpack/dlpack.h"
if strategy_build old -DCMAKE_PREFIX_PATH="$prefix" -DLoomSDK_DLPACK_INCLUDE_DIR="$marked/include"; then
  fail "find_package(LoomSDK) accepted DLPack 0.5"
else
  said "$tmp/strategy/old.log" "is DLPack 0.5, older than 0.6" && said "$tmp/strategy/old.log" libdlpack-dev ||
    { cat "$tmp/strategy/old.log"; fail "find_package(LoomSDK) refused DLPack 0.5 without saying why"; }
fi
# No DLPack at all: not found, and the reason names libdlpack-dev.
if strategy_build none -DCMAKE_PREFIX_PATH="$prefix" -DLoomSDK_DLPACK_INCLUDE_DIR="$tmp/no-such-folder"; then
  fail "find_package(LoomSDK) succeeded without DLPack"
else
  said "$tmp/strategy/none.log" "no DLPack headers were found" && said "$tmp/strategy/none.log" libdlpack-dev ||
    { cat "$tmp/strategy/none.log"; fail "find_package(LoomSDK) failed without DLPack but did not name libdlpack-dev"; }
fi

if [[ $failures -ne 0 ]]; then
  echo "$failures SDK consumer check(s) failed ($prefix)"
  exit 1
fi
echo "SDK at $prefix: the installed example built from a copy with CMake and pkg-config and listed ok${conformance:+ (and conformant)};" \
     "-z defs, ABI $major.$minor and DLPack $(sed -n 's/^-- dlpack=//p' "$tmp/strategy/system.log") checked"
