#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# No binary of the build tree searches the current folder for libraries:
# every RUNPATH/RPATH entry of every ELF file under bin/ and lib/ is
# absolute or $ORIGIN-relative, never empty (ld.so reads an empty entry as
# the current folder) nor relative. Then the proof: `loom --version`, run
# from a folder holding a libspdlog.so.<version> of its own whose
# constructor leaves a marker, must not load it. (The fake filters to the
# real library, so a loom that did load it would still run: only the marker
# would tell.)
#   tests/scripts/runpath.sh BUILD_DIR C_COMPILER        (ctest build.runpath)
set -euo pipefail
build=$(cd "$1" && pwd -P) cc=$2
tmp=$(mktemp -d /tmp/loom-runpath-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
failures=0 checked=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

# 1. Every entry of every RUNPATH/RPATH.
while IFS= read -r elf; do
  checked=$((checked + 1))
  while IFS= read -r line; do
    tag=$(sed -n 's/.*(\(RUNPATH\|RPATH\)).*/\1/p' <<<"$line")
    value=$(sed -n 's/.*\[\(.*\)\]$/\1/p' <<<"$line")
    # A trailing ':' is an empty last entry: split with a sentinel.
    IFS=: read -r -a entries <<<"$value:sentinel"
    unset 'entries[${#entries[@]}-1]'
    empty=0 relative=""
    for entry in "${entries[@]}"; do
      case "$entry" in
        '') empty=1 ;;
        /* | '$ORIGIN' | '$ORIGIN/'* | '${ORIGIN}' | '${ORIGIN}/'*) ;;
        *) relative+=" '$entry'" ;;
      esac
    done
    where="${elf#"$build"/} $tag [$value]"
    ((empty == 0)) || fail "$where has an empty entry, which ld.so reads as the current folder"
    [[ -z "$relative" ]] || fail "$where has relative entries,$relative: ld.so resolves them from the current folder"
  done < <(readelf -d "$elf" 2>/dev/null | grep -E '\((RUNPATH|RPATH)\)' || true)
done < <(find "$build/bin" "$build/lib" -type f -exec sh -c 'head -c4 "$1" | grep -q "ELF"' _ {} \; -print)
echo "$checked ELF files under bin/ and lib/ checked"
[[ $checked -gt 0 ]] || fail "no ELF file found under $build/bin and $build/lib"

# 2. A fake libspdlog in the current folder is not loaded.
loom=$build/bin/loom
soname=$(readelf -d "$loom" | sed -n 's/.*(NEEDED).*\[\(libspdlog\.so[^]]*\)\]/\1/p')
[[ -n "$soname" ]] || { fail "bin/loom needs no libspdlog.so.*: pick another library for this check"; exit 1; }
real=$(cd / && ldd "$loom" | awk -v n="$soname" '$1 == n { print $3 }')
[[ -f "$real" ]] || { fail "ldd finds no $soname for bin/loom"; exit 1; }
cat >"$tmp/fake.c" <<'C'
#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void loaded(void) {
  int fd = open("LOADED-FROM-CWD", O_WRONLY | O_CREAT, 0644);
  if (fd >= 0) close(fd);
}
C
mkdir "$tmp/cwd"
"$cc" -shared -fPIC -o "$tmp/cwd/$soname" -Wl,-soname,"$soname" -Wl,--filter="$real" "$tmp/fake.c"
if out=$(cd "$tmp/cwd" && env -u LD_LIBRARY_PATH -u LD_PRELOAD "$loom" --version 2>&1); then
  echo "loom --version from a folder holding a fake $soname: $out"
else
  fail "loom --version from a folder holding a fake $soname failed: $out"
fi
[[ -e "$tmp/cwd/LOADED-FROM-CWD" ]] && fail "bin/loom loaded ./$soname from the current folder"

if [[ $failures -ne 0 ]]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "no RUNPATH entry is empty or relative; ./$soname was not loaded"
