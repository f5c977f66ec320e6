#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The two commands of the README's quick start.
#   ./run.sh demo   install what is missing, build, run the main job (a local swarm)
#   ./run.sh test   install what is missing (with test tools), build, run every test
# Builds into ./build; warnings are errors when CI=true.
set -euo pipefail
cd "$(dirname "$0")"

mode=${1:-}
case "$mode" in
  demo) packaging/install-deps.sh ;;
  test) packaging/install-deps.sh --test ;;
  *) echo "usage: ./run.sh demo|test" >&2; exit 2 ;;
esac

# ccache hits across clones in other folders (CI builds a fresh clone).
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
preset=default
[[ "${CI:-}" == "true" ]] && preset=ci
jobs=$(nproc)
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$jobs"

if [[ $(id -u) -eq 0 ]]; then  # Open MPI refuses root unless told
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

if [[ "$mode" == demo ]]; then
  echo "== the plugins this build found"
  build/bin/loom plugins
  echo
  echo "== the main job: a local swarm of three peers trains a digits classifier (sklearn's 8x8 digits);"
  echo "   one peer is killed midway and restarted; each prints its final test accuracy"
  examples/swarm-demo.sh build
else
  ctest --preset "$preset" -j "$jobs"
fi
