#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Local updates' quality against synchronous averaging over the same samples
# (issue 17), on loopback: three charlm peers (examples/configs/charlm.toml,
# batch 16, target_batch_size 48) run synchronous f32 first, then each
# variant, every run a fresh swarm of STEPS local steps a peer; per run the
# peers' mean final validation bits per character and its ratio to the
# synchronous run's. Bandwidth plays no part here (bench/swarm_links.py
# measures that): this is only what averaging less often costs the model.
#   bench/local_updates_quality.sh [-b build-dir] [-s STEPS] [-t KEY=VALUE]... [NAME:KEY=VALUE[,KEY=VALUE]...]...
# KEYs are strategy options, or trainer./task. keys for that variant alone
# (e.g. trainer.lr=0.005). Default variants: DiLoCo's outer step, plain
# parameter averaging, and momentum 0.5, each every 50 local steps. -t sets
# a trainer or task key for every run, e.g. -t task.path=corpus.txt.
# KEEP_LOGS=1 keeps the peers' logs (the folder is printed).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build steps=150
sets=()
while getopts "b:s:t:h" o; do
  case $o in
    b) build=$OPTARG ;;
    s) steps=$OPTARG ;;
    t) [[ $OPTARG =~ ^(trainer|task)\.[a-z_]+=.+$ ]] || { echo "local_updates_quality.sh: -t takes trainer.KEY=VALUE or task.KEY=VALUE, not '$OPTARG'" >&2; exit 2; }
       sets+=(--set "$OPTARG") ;;
    *) sed -n '3,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
loom=$build/bin/loom
[[ -x $loom ]] || { echo "local_updates_quality.sh: $loom is missing: build first" >&2; exit 2; }
[[ $steps =~ ^[1-9][0-9]*$ ]] || { echo "local_updates_quality.sh: -s takes a positive step count, not '$steps'" >&2; exit 2; }
variants=("$@")
if [[ ${#variants[@]} -eq 0 ]]; then
  variants=("diloco:local_updates=true,local_steps=50"
            "average:local_updates=true,local_steps=50,outer_lr=1,outer_momentum=0"
            "momentum0.5:local_updates=true,local_steps=50,outer_momentum=0.5")
fi
for v in "${variants[@]}"; do
  [[ ${v%%:*} != "$v" && -n ${v%%:*} && -n ${v#*:} ]] || { echo "local_updates_quality.sh: '$v' is not NAME:KEY=VALUE[,...]" >&2; exit 2; }
done
out=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
      if [[ ${KEEP_LOGS:-0} == 1 ]]; then echo "logs: $out"; else rm -rf "$out"; fi' EXIT

run() {  # run NAME [KEY=VALUE...]: prints the peers' mean final bpc
  local name=$1
  shift
  local extra=() kv
  for kv in "$@"; do
    if [[ $kv == trainer.* || $kv == task.* ]]; then extra+=(--set "$kv"); else extra+=(--set "strategy.options.$kv"); fi
  done
  local port
  port=$(python3 -c 'import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  local common=(--set trainer.max_steps="$steps" --set trainer.threads=1 --set trainer.val_every=0
                --set trainer.log_every=1000 --set trainer.checkpoint_every=0 --set strategy.name=collab
                --set strategy.options.target_batch_size=48 --set strategy.options.listen=127.0.0.1
                --set strategy.options.min_peers=3 --set strategy.options.run_id="quality-$name-$port" "${sets[@]}" "${extra[@]}")
  pids=()
  local i initial where
  for i in 1 2 3; do
    initial="" where=(--set strategy.options.port="$port")
    [[ $i -gt 1 ]] && initial=127.0.0.1:$port where=()
    LOOM_INITIAL_PEERS=$initial timeout 900 "$loom" train "$here/examples/configs/charlm.toml" "${common[@]}" "${where[@]}" \
      --set trainer.output_dir="$out/$name/p$i" > "$out/$name-p$i.log" 2>&1 &
    pids+=($!)
  done
  local p failed=0
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
  pids=()
  if [[ $failed -ne 0 ]]; then
    echo "local_updates_quality.sh: a peer of '$name' failed; its log:" >&2
    for i in 1 2 3; do tail -5 "$out/$name-p$i.log" >&2; done
    return 1
  fi
  grep -ho "final bpc: [0-9.eE+-]*" "$out/$name"-p*.log | awk '{s += $3; n++} END {if (n == 3) printf "%.4f", s / n}'
}

echo "3 charlm peers, $steps local steps a peer, batch 16, target_batch_size 48 (logs in $out)"
base=$(run sync) || exit 1
[[ -n $base ]] || { echo "local_updates_quality.sh: the synchronous run printed no final bpc" >&2; exit 1; }
printf "%-14s %8s %7s\n" variant bpc "x sync"
printf "%-14s %8s %7s\n" sync "$base" 1.000
for v in "${variants[@]}"; do
  name=${v%%:*} opts=${v#*:}
  IFS=, read -r -a kvs <<< "$opts"
  bpc=$(run "$name" "${kvs[@]}") || exit 1
  printf "%-14s %8s %7.3f\n" "$name" "$bpc" "$(awk -v a="$bpc" -v b="$base" 'BEGIN {print a / b}')"
done
