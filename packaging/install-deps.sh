#!/usr/bin/env bash
# Installs the Debian 12 packages that building, running and testing Loom need.
# Idempotent and non-interactive; does nothing but a dpkg query when all is there.
#   packaging/install-deps.sh          build + run dependencies
#   packaging/install-deps.sh --test   also what the test suite and benchmarks use
set -euo pipefail

build_pkgs=(
  build-essential cmake ninja-build ccache pkg-config file binutils
  libtorch-dev libboost-dev libboost-filesystem-dev
  libopenmpi-dev openmpi-bin
  libucx-dev ucx-utils
  libspdlog-dev libfmt-dev libdlpack-dev libtomlplusplus-dev libcli11-dev nlohmann-json3-dev
  libopendht-dev libgloo-dev
  python3-sklearn zlib1g-dev libopenblas0-pthread
  libsodium-dev  # the collab swarm key: sealed records, peer signatures (issue 13)
  libgnutls28-dev  # the collab swarm key: a state's chunks in AES-256-GCM
)
test_pkgs=(
  libgtest-dev libgmock-dev abigail-tools python3-torch procps
  iproute2  # ss: the tests that check where sockets listen
  lintian  # tests/scripts/packages.sh: the .debs have no lintian error
)

want=("${build_pkgs[@]}")
if [[ "${1:-}" == "--test" ]]; then want+=("${test_pkgs[@]}"); fi

missing=()
for p in "${want[@]}"; do
  # dpkg-query prints "install ok installed" only for a fully installed package.
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
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
