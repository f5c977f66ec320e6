#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds Loom and runs its tests on Debian 13 (trixie: LibTorch 2.6, Open MPI 5,
# UCX 1.18, OpenDHT 3 from sid) in a chroot, from this source tree, without
# touching the host's build. Needs root (debootstrap, mounts, chroot).
#   packaging/debian13-check.sh [-r ROOT] [-R REGEX] [-E REGEX] [-j N] [--no-werror] [--no-tests]
#     -r ROOT       the trixie root, made when missing (default $LOOM_TRIXIE_ROOT
#                   or /var/tmp/loom-trixie); kept afterwards, unmounted
#     -R/-E REGEX   run only / leave out the tests matching REGEX (ctest -R / -E)
#     -j N          build and test jobs (default: the number of CPUs)
#     --no-werror   do not build with LOOM_WERROR=ON (CI builds with it)
#     --no-tests    build only
# LOOM_DEBIAN_MIRROR overrides the Debian mirror (default: the host's own).
# Exits 0 when the build and every test run passed, 1 when anything failed,
# 2 when it cannot run at all (not root, no debootstrap, bad arguments).
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd -P)
root=${LOOM_TRIXIE_ROOT:-/var/tmp/loom-trixie}
regex='' exclude='' jobs=$(nproc) werror=ON run_tests=1
usage() { sed -n '6,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    -r) root=${2:?}; shift 2 ;;
    -R) regex=${2:?}; shift 2 ;;
    -E) exclude=${2:?}; shift 2 ;;
    -j) jobs=${2:?}; shift 2 ;;
    --no-werror) werror=OFF; shift ;;
    --no-tests) run_tests=0; shift ;;
    -h|--help) usage ;;
    *) echo "debian13-check: unknown argument '$1'" >&2; usage ;;
  esac
done

if [[ $(id -u) -ne 0 ]]; then
  echo "debian13-check: must run as root (it runs debootstrap, mounts and chroot)" >&2
  exit 2
fi
root=$(realpath -m "$root")
[[ "$root" != / ]] || { echo "debian13-check: the root cannot be /" >&2; exit 2; }

# The host's own mirror first: it is the one known to be reachable from here.
mirror=${LOOM_DEBIAN_MIRROR:-}
if [[ -z "$mirror" ]]; then
  mirror=$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null |
           grep -v -- '-security' | head -1 || true)
  [[ -n "$mirror" ]] || mirror=$(awk '$1 == "deb" && $0 !~ /security/ { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit } }' \
                                 /etc/apt/sources.list 2>/dev/null || true)
  [[ -n "$mirror" ]] || mirror=http://deb.debian.org/debian
fi

# One run per root at a time: two would share mounts and the build folder.
exec 9>"$root.lock"
flock -n 9 || { echo "debian13-check: another run holds $root.lock" >&2; exit 2; }

mounted=()
cleanup() {
  local rc=$? p
  # Ignored, not reset: Ctrl-C or timeout(1) signals the whole process group,
  # and a second signal must not cut the unmounting short.
  trap '' INT TERM
  trap - EXIT
  # Processes left in the chroot (an interrupted mpirun's ranks) keep the
  # mounts busy; they are this run's own. (-ef: no fork per process.)
  for p in /proc/[0-9]*; do
    [[ "$p/root" -ef "$root" ]] && kill -KILL "${p#/proc/}" 2>/dev/null || true
  done
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" 2>/dev/null ||
      echo "debian13-check: could not unmount ${mounted[i]}" >&2
  done
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# (a) The root, made once. debootstrap writes into a side folder that is renamed
# only when complete, so an interrupted run never leaves a root that looks done.
if [[ ! -x "$root/usr/bin/apt-get" ]]; then
  if ! command -v debootstrap >/dev/null; then
    echo "debian13-check: $root has no trixie root and debootstrap is missing (apt-get install debootstrap)" >&2
    exit 2
  fi
  echo "== debootstrap trixie into $root from $mirror"
  rm -rf "$root.partial"
  debootstrap --variant=minbase trixie "$root.partial" "$mirror" > "$root.debootstrap.log" 2>&1 ||
    { echo "debian13-check: debootstrap failed, see $root.debootstrap.log" >&2; exit 1; }
  rm -rf "$root"
  mv "$root.partial" "$root"
fi

# mount SRC DST [OPTIONS]: bind mounts become slaves, so nothing mounted
# below them (dev/pts, dev/shm) propagates back to the host's /dev.
bind() {
  mkdir -p "$2"
  mount --bind "$1" "$2"
  mounted+=("$2")
  mount --make-rslave "$2"
  [[ "${3:-}" != ro ]] || mount -o remount,bind,ro "$2"
}
mount -t proc proc "$root/proc"; mounted+=("$root/proc")
bind /sys "$root/sys" ro
bind /dev "$root/dev"
bind /dev/pts "$root/dev/pts"
# A private /dev/shm: Open MPI's and UCX's shared memory segments stay apart
# from the host's.
mount -t tmpfs -o mode=1777,nosuid,nodev shm "$root/dev/shm"; mounted+=("$root/dev/shm")
# (c) The sources read-only: a build or test that writes into them is a bug.
# Folder names no file mentions for another reason (core/src/, ../build/):
# the package tests look for the source and build folders in what ships.
bind "$src" "$root/loom-src" ro
cp /etc/resolv.conf "$root/etc/resolv.conf"

# A clean environment inside: nothing of the host's (CCACHE_DIR, CUDA, ...).
in_root() {
  chroot "$root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    LANG=C.UTF-8 TERM="${TERM:-dumb}" CCACHE_BASEDIR=/loom-src CCACHE_NOHASHDIR=true \
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$@"
}

# (b) Dependencies, through the same script users run. Trixie has no OpenDHT;
# the chroot is ours, so take it from sid (pinned to OpenDHT alone).
echo "== dependencies (packaging/install-deps.sh --test --opendht-from-sid)"
in_root env LOOM_DEBIAN_MIRROR="$mirror" /loom-src/packaging/install-deps.sh --test --opendht-from-sid
versions=$(in_root dpkg-query -W -f='${Package} ${Version}\n' libtorch-dev libopenmpi-dev libucx-dev libopendht-dev \
           libfmt-dev libspdlog-dev libgtest-dev g++ cmake 2>/dev/null || true)

# (c) The build, in a folder of the root (ccache's cache stays there too).
build=/loom-build
log="$root$build.log"
echo "== build in $root$build (LOOM_WERROR=$werror), log $log"
build_ok=1
{
  in_root cmake -S /loom-src -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_WERROR="$werror" &&
    in_root nice -n 10 cmake --build "$build" -j "$jobs" -- -k 0
} > "$log" 2>&1 || build_ok=0
warnings=$(grep -c ': warning: ' "$log" || true)
[[ $build_ok -eq 1 ]] || grep -E ': (error|warning): |^FAILED: ' "$log" | head -40 >&2

# (d) The tests. Open MPI 5 refuses root without OMPI_ALLOW_RUN_AS_ROOT* (set above).
tests_ok=1 test_summary='not run'
if [[ $build_ok -eq 1 && $run_tests -eq 1 ]]; then
  args=(--test-dir "$build" -j "$jobs" --timeout 400 --output-on-failure)
  [[ -z "$regex" ]] || args+=(-R "$regex")
  [[ -z "$exclude" ]] || args+=(-E "$exclude")
  echo "== ctest ${args[*]}, log $root$build.ctest.log"
  in_root nice -n 10 ctest "${args[@]}" > "$root$build.ctest.log" 2>&1 || tests_ok=0
  test_summary=$(grep -E 'tests passed|No tests were found' "$root$build.ctest.log" | tail -1 || true)
  [[ -n "$test_summary" ]] || { test_summary='ctest gave no summary'; tests_ok=0; }
fi

# (e) Summary.
echo
echo "== Debian 13 check of $src"
echo "$versions" | sed 's/^/   /'
echo "   build: $([[ $build_ok -eq 1 ]] && echo ok || echo FAILED), $warnings compiler warning(s)"
echo "   tests: $test_summary"
if [[ $tests_ok -eq 0 ]]; then
  sed -n '/^The following tests FAILED:/,$p' "$root$build.ctest.log" | grep -E '^\s+[0-9]+ - ' || true
fi
[[ $build_ok -eq 1 && $tests_ok -eq 1 ]] || exit 1
