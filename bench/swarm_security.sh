#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What a swarm's protections cost (issue 13), in one run on loopback:
#  1. loom_bench_swarm_key: a joiner's state load (SIZE MiB) and a record's
#     DHT round trip, open against keyed (bench/swarm_key.cpp);
#  2. two teacher peers training EPOCHS collaborative epochs, open and keyed,
#     REPS times each, alternated: the median time a round holds the training
#     thread (matchmaking + averaging, from the peers' round lines), the
#     peers' CPU time per round (from their closing lines: what the key
#     costs, whatever the peers' skew) and the run's wall time, keyed/open;
#  3. four teacher peers (hidden 1024) training EPOCHS/2 epochs with aggregation "mean" and
#     "centered_clip", REPS times each, alternated: the same figures,
#     centered_clip/mean.
# The issue's targets: the keyed round at most 1.05x, the keyed load at most
# 1.3x, centered_clip's round on 4 peers at most 2x mean's.
# Usage: bench/swarm_security.sh [build-dir] [SIZE_MIB=256] [EPOCHS=200] [REPS=4]
set -euo pipefail
build=${1:-build}
size=${2:-256}
epochs=${3:-200}
reps=${4:-4}
loom=$build/bin/loom
[[ -x $loom && -x $build/bin/loom_bench_swarm_key ]] || { echo "swarm_security.sh: build first ($build)" >&2; exit 2; }
here=$(cd "$(dirname "$0")/.." && pwd)
out=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$out"' EXIT

"$build/bin/loom_bench_swarm_key" "$size" 9

"$loom" swarm keygen "$out/swarm.key" > /dev/null
swarm() {  # swarm TAG PEERS STEPS [--set ...]: prints "wall_s median_round_ms rounds"
  local tag=$1 peers=$2 steps=$3 sets=() t0 t1 addr="" logs=() members=()
  shift 3
  sets=(--set trainer.max_steps="$steps" --set trainer.threads=1 --set trainer.log_every=1000
        --set strategy.name=collab --set strategy.options.target_batch_size=256
        --set strategy.options.listen=127.0.0.1 --set strategy.options.verbose=true
        --set strategy.options.run_id="bench-sec-$tag-$$" --set strategy.options.min_peers="$peers" "$@")
  t0=$(date +%s.%N)
  for i in $(seq "$peers"); do
    LOOM_INITIAL_PEERS=$addr "$loom" train "$here/examples/configs/teacher.toml" "${sets[@]}" \
      --set trainer.output_dir="$out/$tag-$i" > "$out/$tag-$i.log" 2>&1 &
    pids+=($!); members+=($!); logs+=("$out/$tag-$i.log")
    if [[ -z $addr ]]; then
      for _ in $(seq 300); do
        addr=$(grep -o "listening on [0-9.:]*" "$out/$tag-1.log" | head -1 | cut -d' ' -f3) && [[ -n $addr ]] && break
        sleep 0.1
      done
    fi
  done
  wait "${members[@]}" || { echo "swarm_security.sh: the $tag peers failed (logs: $out/$tag-*.log)" >&2; tail -5 "$out/$tag-1.log" >&2; exit 1; }
  t1=$(date +%s.%N)
  python3 - "$t0" "$t1" "${logs[@]}" <<'PY'
import re, statistics, sys
t0, t1 = float(sys.argv[1]), float(sys.argv[2])
rounds, ops, cpu = [], [], 0.0
for path in sys.argv[3:]:
    for line in open(path):
        m = re.search(r"CPU time ([0-9.]+) s user, ([0-9.]+) s system", line)
        if m: cpu += float(m.group(1)) + float(m.group(2))
        m = re.search(r"averaged gradients .*\(matchmaking ([0-9.]+) ms.*averaging ([0-9.]+) ms", line)
        if m: rounds.append(float(m.group(1)) + float(m.group(2)))
        m = re.search(r"ms, (?:allreduce|centered_clip) ([0-9.]+) ms", line)
        if m: ops.append(float(m.group(1)))
nan = float('nan')
# CPU per round: every peer's CPU time over the run, per round a peer took
# part in; what the key or the aggregation costs, whatever the peers' skew.
print(f"{t1 - t0:.2f} {statistics.median(rounds) if rounds else nan} {len(rounds)} "
      f"{statistics.median(ops) if ops else nan} {statistics.mean(ops) if ops else nan:.2f} "
      f"{1000 * cpu / len(rounds) if rounds else nan:.2f}")
PY
}
# compare NAME A B PEERS STEPS "A's sets" "B's sets": REPS runs of each, alternated
# (a round's time is mostly how far apart the peers reach it, which varies
# more from run to run than the key or the aggregation changes it).
compare() {
  local name=$1 a=$2 b=$3 peers=$4 steps=$5 a_sets=$6 b_sets=$7 results=()
  for rep in $(seq "$reps"); do
    # shellcheck disable=SC2086  # the sets are words on purpose
    read -r aw ar an ao am ac < <(swarm "$a$rep" "$peers" "$steps" $a_sets)
    # shellcheck disable=SC2086
    read -r bw br bn bo bm bc < <(swarm "$b$rep" "$peers" "$steps" $b_sets)
    echo "rep $rep: $a $aw s (median round $ar ms, $an rounds; collective $ao ms median, $am ms mean; CPU $ac ms a round)," \
         "$b $bw s (median round $br ms, $bn rounds; collective $bo ms median, $bm ms mean; CPU $bc ms a round)"
    results+=("$aw $ar $am $ac" "$bw $br $bm $bc")
  done
  python3 - "$name" "$a" "$b" "${results[@]}" <<'PY'
import statistics, sys
name, a, b = sys.argv[1:4]
vals = [tuple(map(float, v.split())) for v in sys.argv[4:]]
first, second = vals[0::2], vals[1::2]
aw = statistics.median(v[0] for v in first); bw = statistics.median(v[0] for v in second)
ar = statistics.median(v[1] for v in first); br = statistics.median(v[1] for v in second)
am = statistics.median(v[2] for v in first); bm = statistics.median(v[2] for v in second)
ac = statistics.median(v[3] for v in first); bc = statistics.median(v[3] for v in second)
print(f"{name}: CPU a round {ac:.1f} ms {a}, {bc:.1f} ms {b} ({bc / ac:.2f}x {b}/{a}); wall {bw / aw:.2f}x {b}/{a}; "
      f"median round on the training thread "
      f"{ar:.0f} ms {a}, {br:.0f} ms {b} ({br / ar if ar else float('nan'):.2f}x {b}/{a}); "
      f"mean time in the averaging collective {am:.2f} ms {a}, {bm:.2f} ms {b} "
      f"({bm / am if am else float('nan'):.2f}x {b}/{a})")
PY
}
compare "two teacher peers (target: round <= 1.05x)" open keyed 2 "$epochs" "" \
  "--set strategy.options.swarm_key=$out/swarm.key"
compare "four teacher peers, hidden 1024 (target: round <= 2x)" mean clip 4 $((epochs / 2)) \
  "--set task.hidden=1024 --set strategy.options.aggregation=mean" \
  "--set task.hidden=1024 --set strategy.options.aggregation=centered_clip"
