#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian 12 (bookworm) or 13 (trixie) packages that building,
# running and testing Loom need. Idempotent and non-interactive; does nothing
# but a dpkg query when all is there.
#   packaging/install-deps.sh          build + run dependencies
#   packaging/install-deps.sh --test   also what the test suite and benchmarks use
#   --opendht-from-sid                 on trixie: take OpenDHT from sid (see below;
#                                      LOOM_DEBIAN_MIRROR names the mirror)
set -euo pipefail

with_test=0 opendht_from_sid=0
for arg in "$@"; do
  case "$arg" in
    --test) with_test=1 ;;
    --opendht-from-sid) opendht_from_sid=1 ;;
    *) echo "usage: packaging/install-deps.sh [--test] [--opendht-from-sid]" >&2; exit 2 ;;
  esac
done
codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}") || codename=

build_pkgs=(
  build-essential cmake ninja-build ccache pkg-config file binutils
  libtorch-dev libboost-dev libboost-filesystem-dev
  libopenmpi-dev openmpi-bin
  libucx-dev ucx-utils
  libspdlog-dev libfmt-dev libdlpack-dev libtomlplusplus-dev libcli11-dev nlohmann-json3-dev
  libopendht-dev libgloo-dev
  python3-sklearn zlib1g-dev libopenblas0-pthread
  python3-dev python3-pybind11 python3-torch  # the Python package (python/)
  libsodium-dev  # the collab swarm key: sealed records, peer signatures (issue 13)
  libgnutls28-dev  # the collab swarm key: a state's chunks in AES-256-GCM
)
test_pkgs=(
  libgtest-dev libgmock-dev abigail-tools python3-torch procps
  iproute2  # ss: the tests that check where sockets listen; ip, tc: tests/netns's hosts
  nftables  # tests/netns: the masquerading routers of NAT'd hosts
  lintian  # tests/scripts/packages.sh: the .debs have no lintian error
  python3-venv python3-pip python3-setuptools python3-wheel  # tests/scripts/python_pip.sh: pip install ./python offline
)

want=("${build_pkgs[@]}")
if [[ $with_test -eq 1 ]]; then want+=("${test_pkgs[@]}"); fi

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

# The package names are the same in bookworm and trixie, but trixie ships no
# OpenDHT package at all; of Debian's suites only sid has it (3.0).
# Opted in, take exactly libopendht-dev, its library and the fmt 11 runtime it
# links from sid, pinned so that nothing else ever comes from there.
sid_list=/etc/apt/sources.list.d/loom-sid-opendht.list
sid_pin=/etc/apt/preferences.d/loom-sid-opendht
if [[ "$codename" == trixie ]] && ! installed libopendht-dev; then
  if [[ $opendht_from_sid -eq 0 ]]; then
    echo "install-deps: Debian 13 (trixie) has no libopendht-dev (Loom's collab plugin needs OpenDHT);" >&2
    echo "  rerun with --opendht-from-sid to take OpenDHT 3 alone from sid (pinned), or install it yourself" >&2
    exit 2
  fi
  if [[ ! -f "$sid_list" || ! -f "$sid_pin" ]]; then
    if [[ $(id -u) -ne 0 ]]; then
      echo "install-deps: adding a pinned sid source for OpenDHT needs root" >&2
      exit 2
    fi
    # check-valid-until=no: mirrors and snapshots of sid often carry an expired
    # Release date; the signature is still checked.
    echo "deb [check-valid-until=no] ${LOOM_DEBIAN_MIRROR:-http://deb.debian.org/debian} sid main" > "$sid_list"
    cat > "$sid_pin" <<'PIN'
Package: *
Pin: release n=sid
Pin-Priority: -1

Package: libopendht-dev libopendht3t64 libfmt11
Pin: release n=sid
Pin-Priority: 500
PIN
  fi
fi

missing=()
for p in "${want[@]}"; do
  # dpkg-query prints "install ok installed" only for a fully installed package.
  if ! installed "$p"; then
    missing+=("$p")
  fi
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "install-deps: installing ${missing[*]}" >&2
if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: these Debian packages are missing and installing them needs root:" >&2
  echo "  apt-get install ${missing[*]}" >&2
  exit 2
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
