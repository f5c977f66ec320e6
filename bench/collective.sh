#!/usr/bin/env bash
# The collective benchmark of the Foundation issue, in one run:
#   1. `loom bench collective` sweeps 8 B .. 64 MiB through a plugin (default mpi)
#   2. loom_bench_boundary: the plugin boundary against direct MPI calls
# Usage: bench/collective.sh [build-dir] [ranks] [plugin]
set -euo pipefail
build=${1:-build} ranks=${2:-2} plugin=${3:-mpi}
mpirun=(mpirun --oversubscribe -np "$ranks")
[[ $(id -u) -eq 0 ]] && mpirun+=(--allow-run-as-root)
"${mpirun[@]}" "$build/bin/loom" bench collective --plugin "$plugin" --json "$build/bench-$plugin-allreduce.json"
echo
"${mpirun[@]}" "$build/bin/loom_bench_boundary" "${ITERS:-20000}" "${ROUNDS:-7}"
