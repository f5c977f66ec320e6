#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# How the ucx plugin's threshold and chunk defaults were chosen: sweeps of
# `loom bench collective` (2 ranks, loom launch) with the options forced one
# way or the other, printed side by side. Noisy machine: run it twice.
#
#   bench/ucx_tune.sh [build-dir]
#
#  1. ring_threshold_bytes: allreduce by recursive doubling only vs ring only;
#     the default is the smallest size from which the ring is faster.
#  2. tree_pipeline_threshold_bytes: broadcast as one staged message vs
#     pipelined in place.
#  3. chunk_bytes x pipeline_depth for large allreduces.
#  4. cma_threshold_bytes: broadcast (one message per link) with every
#     message by cross-memory attach vs none; the default is the smallest
#     size from which cross-memory attach is faster.
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
loom=$build/bin/loom
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run NAME OP MIN MAX key=value...: prints "size time_us busbw" rows to $tmp/NAME
run() {
  local name=$1 op=$2 min=$3 max=$4
  shift 4
  { echo '[collective]'; echo 'name = "ucx"'; echo '[collective.options]'
    for kv in "$@"; do echo "${kv%%=*} = ${kv#*=}"; done; } > "$tmp/$name.toml"
  "$loom" launch -n 2 --timeout 600 -- "$loom" --config "$tmp/$name.toml" bench collective --plugin ucx --op "$op" \
    --min-bytes "$min" --max-bytes "$max" | sed -n 's/^\[rank 0\] \([0-9]\)/\1/p' |
    awk '{print $1, $3, $5}' > "$tmp/$name"
}
side_by_side() {  # title names...
  echo "# $1: time_us per size"
  shift
  printf '%-10s' bytes; for n in "$@"; do printf '%14s' "$n"; done; echo
  paste "${@/#/$tmp/}" | awk -v k=$# '{printf "%-10s", $1; for (i = 0; i < k; i++) printf "%14s", $(2 + 3 * i); print ""}'
  echo
}

run rd allreduce 256 1048576 ring_threshold_bytes=1099511627776
run ring allreduce 256 1048576 ring_threshold_bytes=0
side_by_side "allreduce: recursive doubling vs ring" rd ring

run staged broadcast 256 1048576 tree_pipeline_threshold_bytes=1099511627776
run pipelined broadcast 256 1048576 tree_pipeline_threshold_bytes=0
side_by_side "broadcast: one staged message vs pipelined in place" staged pipelined

names=()
for chunk in 65536 131072 262144 524288 1048576; do
  for depth in 2 4 8; do
    run "c${chunk}_d${depth}" allreduce 1048576 67108864 chunk_bytes=$chunk pipeline_depth=$depth
    names+=("c${chunk}_d${depth}")
  done
done
side_by_side "large allreduce: chunk_bytes (c) x pipeline_depth (d)" "${names[@]}"

run cma_always broadcast 4096 4194304 cma_threshold_bytes=0 tree_pipeline_threshold_bytes=1099511627776
run cma_never broadcast 4096 4194304 cma_threshold_bytes=-1 tree_pipeline_threshold_bytes=1099511627776
side_by_side "broadcast, one staged message: cross-memory attach always vs never" cma_always cma_never
