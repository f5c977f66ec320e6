#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Issue 4's benchmark, in one run, 2 ranks on this machine: allreduce from 8 B
# to 64 MiB through the ucx plugin, the mpi plugin (Open MPI), LibTorch's
# c10d::ProcessGroupGloo, and UCX's own point-to-point tag bandwidth and
# latency (ucx_perftest) over the transports the ucx plugin's endpoints use,
# as the physical reference. The machine is shared and noisy, so the three
# sweeps run ROUNDS times, interleaved (ucx, ucx without cross-memory
# attach, mpi, gloo, ucx, ...),
# and every backend is credited with its best time per size; the summary
# prints the ratios the issue sets as targets, and the spread over rounds.
#
#   bench/compare_collectives.sh [build-dir] [out-dir]
#
# Environment: ROUNDS (default 3); MAX_BYTES (default 64 MiB) shortens the
# sweeps; UCX_TLS is honoured by the ucx plugin and by ucx_perftest.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-build}" && pwd)
out=${2:-$build/compare}
mkdir -p "$out"
rm -f "$out"/*.json
loom=$build/bin/loom
max=${MAX_BYTES:-67108864}
rounds=${ROUNDS:-3}
mpirun=(mpirun --oversubscribe -np 2)
[[ $(id -u) -eq 0 ]] && mpirun+=(--allow-run-as-root)

# launch ARGS...: loom launch -n 2 (its master port lies below the kernel's
# ephemeral range, so parallel jobs cannot take it first), each rank bound to
# core LOCAL_RANK as mpirun binds its ranks by default: unbound, two polling
# ranks on a loaded machine often share one core and every small message then
# waits for a time slice (measured: 53 us instead of 1 us at 8 B).
ncores=$(nproc)
launch() {
  "$loom" launch -n 2 --timeout 600 -- sh -c 'exec taskset -c $((LOCAL_RANK % $0)) "$@"' "$ncores" "$@"
}

# The ucx plugin with large messages forced through UCX's shared memory (no
# cross-memory attach): the plugin's path before that option existed.
nocma=$out/ucx-nocma.toml
printf '[collective]\nname = "ucx"\n[collective.options]\ncma_threshold_bytes = -1\n' > "$nocma"

# The machine is shared: the load with every round tells whether a round's
# figures mean anything (at load 5 and more on 2 cores they swing 3x).
load() { cut -d' ' -f1-3 /proc/loadavg; }
for r in $(seq "$rounds"); do
  echo "== round $r (load $(load)): ucx plugin (loom launch -n 2)"
  launch "$loom" bench collective --plugin ucx --max-bytes "$max" --json "$out/ucx.$r.json" | sed -n 's/^\[rank 0\] //p'
  echo "== round $r: ucx plugin without cross-memory attach (loom launch -n 2)"
  launch "$loom" --config "$nocma" bench collective --plugin ucx --max-bytes "$max" --json "$out/ucx-nocma.$r.json" |
    sed -n 's/^\[rank 0\] //p'
  echo "== round $r: mpi plugin (mpirun -np 2)"
  "${mpirun[@]}" "$loom" bench collective --plugin mpi --max-bytes "$max" --json "$out/mpi.$r.json"
  echo "== round $r: c10d::ProcessGroupGloo (loom launch -n 2)"
  if [[ -x $build/bin/compare_gloo_allreduce ]]; then
    launch "$build/bin/compare_gloo_allreduce" --max-bytes "$max" --json "$out/gloo.$r.json" | sed -n 's/^\[rank 0\] //p'
  else
    echo "(compare_gloo_allreduce was not built)"
  fi
  echo
done

# The transports of the plugin's endpoints, from its debug log ("lane[0]: 3:sysv/memory.0 ..."),
# so that ucx_perftest measures the same physical path; plus cma when the
# plugin moves large messages by cross-memory attach itself.
log=$(launch "$loom" --log-level debug bench collective --plugin ucx --max-bytes 8 --iters 1 --warmup 0 2>&1)
tls=$(sed -n 's/.*lane\[[0-9]*\]: *[0-9]*:\([a-z_]*\)\/.*/\1/p' <<<"$log" | sort -u | paste -sd, -)
tls=${tls:-sysv},self
if grep -q 'cross-memory attach from [0-9]' <<<"$log" && ! grep -q 'not available here' <<<"$log"; then tls=$tls,cma; fi
echo "== ucx_perftest, UCX_TLS=$tls (the plugin's transports), best of $rounds"
perftest() {  # test size iterations
  local port=$((20000 + RANDOM % 12000))  # below the ephemeral range (32768 on)
  UCX_TLS=$tls timeout 120 ucx_perftest -t "$1" -s "$2" -n "$3" -w 5 -p "$port" > /dev/null 2>&1 &
  local server=$!
  sleep 1
  UCX_TLS=$tls timeout 120 ucx_perftest 127.0.0.1 -t "$1" -s "$2" -n "$3" -w 5 -p "$port" -f 2>/dev/null | tail -1
  wait "$server" || true
}
# Columns (-f): iterations, latency 50%ile/avg/overall (us), bandwidth avg/overall (MB/s = 2^20 B/s), rates.
# The "avg" columns cover the last report interval only; the overall ones the whole run.
bw_mib=0 lat_us=1e9
for r in $(seq "$rounds"); do
  bw=$(perftest tag_bw "$max" 40)
  lat=$(perftest tag_lat 8 100000)
  echo "tag_bw $max B: $bw"
  echo "tag_lat 8 B:   $lat"
  bw_mib=$(awk -v a="$bw_mib" -v b="$(awk '{print $6}' <<<"$bw")" 'BEGIN {print (b + 0 > a + 0) ? b : a}')
  lat_us=$(awk -v a="$lat_us" -v b="$(awk '{print $4}' <<<"$lat")" 'BEGIN {print (b + 0 < a + 0 && b + 0 > 0) ? b : a}')
done
echo "load at the end: $(load)"
echo
python3 "$here/compare_collectives_table.py" "$out" "$bw_mib" "$lat_us" "$tls" "$max"
