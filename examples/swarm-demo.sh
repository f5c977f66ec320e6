#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A local swarm: three peers on loopback train `digits` together with the
# collab strategy; the third is killed (SIGKILL) midway and started again,
# loads the swarm's state from a live peer and trains on. Each peer prints
# its final accuracy.
#   examples/swarm-demo.sh [build-dir]
set -euo pipefail
build=${1:-build}
loom=$build/bin/loom
config=$(dirname "$0")/configs/digits-collab.toml
[[ -x $loom ]] || { echo "swarm-demo: $loom is missing: build first" >&2; exit 2; }
out=runs/swarm-demo
rm -rf "$out" && mkdir -p "$out"
port=$(python3 -c 'import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# One thread per peer: the three share this machine's cores.
common=(--set strategy.options.listen=127.0.0.1 --set strategy.options.run_id="demo-$port" --set trainer.max_steps=300
        --set trainer.threads=1)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

started=0
start() {  # start NAME MIN_PEERS [INITIAL_PEER]: sets $started to its pid
  local name=$1 min=$2 initial=${3:-}
  local where=(--set strategy.options.port="$port")
  [[ -n $initial ]] && where=()
  LOOM_INITIAL_PEERS=$initial "$loom" train "$config" "${common[@]}" "${where[@]}" \
    --set trainer.output_dir="$out/$name" --set strategy.options.min_peers="$min" \
    > >(sed -u "s/^/[$name] /" >> "$out/$name.log") 2>&1 &
  started=$!
  pids+=("$started")
}

echo "swarm-demo: three peers on 127.0.0.1, the first on port $port (logs in $out/)"
start peer1 3; p1=$started
start peer2 3 "127.0.0.1:$port"; p2=$started
start peer3 3 "127.0.0.1:$port"; p3=$started

# Kill peer3 once the swarm is well under way, then bring it back.
for _ in $(seq 600); do grep -q "step 100/" "$out/peer3.log" 2>/dev/null && break; sleep 0.1; done
echo "swarm-demo: SIGKILL peer3 at $(grep -o 'step [0-9]*/[0-9]*' "$out/peer3.log" | tail -1)"
kill -9 "$p3"; wait "$p3" 2>/dev/null || true
sleep 1
echo "swarm-demo: restarting peer3; it loads the swarm's state from a live peer"
start peer3 1 "127.0.0.1:$port"; p3=$started

status=0
for p in "$p1" "$p2" "$p3"; do wait "$p" || status=1; done
grep -h "loaded the state\|final accuracy" "$out"/peer*.log | sed 's/\[strategy .collab.\] //'
exit $status
