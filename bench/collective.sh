#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The collective benchmark of the Foundation issue, in one run:
#   1. `loom bench collective` sweeps 8 B .. 64 MiB through a plugin (default mpi)
#   2. loom_bench_boundary: the plugin boundary against direct MPI calls at
#      1, 1024 and 65536 floats, as medians of per-round ratios (ROUNDS rounds
#      of measurements lasting about US microseconds; see bench/plugin_boundary.cpp)
# Usage: [US=1000] [ROUNDS=301] bench/collective.sh [build-dir] [ranks] [plugin]
set -euo pipefail
build=${1:-build} ranks=${2:-2} plugin=${3:-mpi}
mpirun=(mpirun --oversubscribe -np "$ranks")
[[ $(id -u) -eq 0 ]] && mpirun+=(--allow-run-as-root)
"${mpirun[@]}" "$build/bin/loom" bench collective --plugin "$plugin" --json "$build/bench-$plugin-allreduce.json"
echo
"${mpirun[@]}" "$build/bin/loom_bench_boundary" "${US:-1000}" "${ROUNDS:-301}"
