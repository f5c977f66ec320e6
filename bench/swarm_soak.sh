#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Memory soak of the collab strategy (issue 12): a few collab peers train on
# loopback for DURATION seconds while their VmRSS and VmHWM are sampled from
# /proc every INTERVAL seconds into a CSV; optionally one peer's DHT port
# takes junk UDP datagrams the whole time. At the end it prints, per peer,
# the RSS growth in MiB per minute over the first and the second half of the
# run: a leak keeps growing in the second half, allocator retention and DHT
# storage level off (DHT storage within a minute: values live 60 s; OpenDHT's
# searches only after 62 minutes, so a shorter run cannot tell those from a
# leak: count them, see dht.cpp).
#
# Usage: bench/swarm_soak.sh [build-or-install-dir]     (default: build)
#        bench/swarm_soak.sh --report rss.csv             (figures of a CSV again)
# Environment (all optional):
#   DURATION=1800    seconds the peers run
#   INTERVAL=30      seconds between samples
#   PEERS=3          collab peers (2 or more)
#   JUNK_RATE=0      junk UDP datagrams per second against one peer (0: none)
#   JUNK_SECONDS=    seconds the junk runs (default: the whole run; less shows
#                    whether what it cost is given back)
#   JUNK_PEERS=2     which peers (1-based, space-separated) take them, each at JUNK_RATE
#   JUNK_KIND=random random: random bytes from one socket; ports: random bytes,
#                    each datagram from a fresh socket (a new source port)
#   CONFIG=examples/configs/teacher.toml   any task; trainer.threads = 1
#   CPUS=            taskset CPU list for all peers (e.g. 0), empty: any CPU
#   NICE=10          niceness of the peers
#   OUT=             folder for the logs and the CSV (default: a new temp one;
#                    kept at the end)
#   WARMUP=120       seconds after the start left out of the growth figures
#                    (the peers load LibTorch and fill their DHT storage)
#   EXTRA_SET=       more --set options for every peer
#   WRAP=            command prefix for one peer (e.g. "heaptrack -o /tmp/p1"); its
#   WRAP_PEER=1      RSS includes the tool's own, so compare the other peers
#   TARGET=2048      target_batch_size (samples per collaborative epoch)
# Every process the script starts is ended when it exits, Ctrl-C (or kill -TERM
# of the script) included.
set -euo pipefail
report() {  # report CSV: RSS growth per peer, first half against second
  python3 - "$1" "${WARMUP:-120}" <<'PY'
import csv, sys
warmup = float(sys.argv[2])
rows = [r for r in csv.DictReader(open(sys.argv[1])) if float(r["t_s"]) >= warmup]
peers = sorted({k.split("_")[0] for k in rows[0] if k.endswith("_rss_kb")}, key=lambda s: int(s[1:]))
t = [float(r["t_s"]) for r in rows]
def slope(xs, ys):  # least squares, KB/s
    n = len(xs); mx = sum(xs) / n; my = sum(ys) / n
    d = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / d if d else 0.0
half = (t[0] + t[-1]) / 2
print(f"growth after the first {warmup:.0f} s: {t[0]:.0f}-{half:.0f} s against {half:.0f}-{t[-1]:.0f} s")
print(f"{'peer':5} {'RSS start':>10} {'RSS end':>10} {'HWM end':>10}  {'MiB/min 1st half':>17} {'MiB/min 2nd half':>17}")
for p in peers:
    pts = [(x, float(r[p + "_rss_kb"])) for x, r in zip(t, rows) if r[p + "_rss_kb"]]
    first = [q for q in pts if q[0] <= half]; second = [q for q in pts if q[0] >= half]
    s1 = slope(*zip(*first)) * 60 / 1024 if len(first) > 1 else float("nan")
    s2 = slope(*zip(*second)) * 60 / 1024 if len(second) > 1 else float("nan")
    hwm = [float(r[p + "_hwm_kb"]) for r in rows if r[p + "_hwm_kb"]]
    print(f"{p:5} {pts[0][1] / 1024:7.1f}MiB {pts[-1][1] / 1024:7.1f}MiB {hwm[-1] / 1024:7.1f}MiB  {s1:17.3f} {s2:17.3f}")
PY
}
# bench/swarm_soak.sh --report CSV: the figures of an earlier run's CSV.
if [[ ${1:-} == --report ]]; then report "$2"; exit; fi
dir=${1:-build}
loom=$dir/bin/loom
[[ -x $loom ]] || { echo "swarm_soak.sh: $loom is missing: build (or install) first" >&2; exit 2; }
here=$(cd "$(dirname "$0")/.." && pwd)
duration=${DURATION:-1800}
interval=${INTERVAL:-30}
npeers=${PEERS:-3}
junk_rate=${JUNK_RATE:-0}
junk_peers=${JUNK_PEERS:-2}
wrap_peer=${WRAP_PEER:-1}
junk_kind=${JUNK_KIND:-random}
config=${CONFIG:-$here/examples/configs/teacher.toml}
out=${OUT:-$(mktemp -d /tmp/loom-soak-XXXXXX)}
mkdir -p "$out"
csv=$out/rss.csv
(( npeers >= 2 )) || { echo "swarm_soak.sh: PEERS must be 2 or more" >&2; exit 2; }
for j in $junk_peers; do (( j >= 1 && j <= npeers )) || { echo "swarm_soak.sh: JUNK_PEERS: no peer $j" >&2; exit 2; }; done

pids=()
stop_all() {
  trap - EXIT INT TERM
  # Each peer leads its own process group (setsid), so a WRAP tool's children end too.
  for p in "${pids[@]}"; do kill -- "-$p" 2>/dev/null || kill "$p" 2>/dev/null || true; done
  sleep 2
  for p in "${pids[@]}"; do kill -9 -- "-$p" 2>/dev/null || kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  echo "swarm_soak.sh: logs and $csv kept in $out"
}
trap stop_all EXIT
trap 'exit 130' INT TERM

export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
port=$(python3 -c 'import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
prefix=(nice -n "${NICE:-10}")
[[ -n ${CPUS:-} ]] && prefix=(taskset -c "$CPUS" "${prefix[@]}")
set_opts=(--set trainer.max_steps=100000000 --set trainer.threads=1 --set trainer.log_every=100000
          --set trainer.val_every=0 --set trainer.checkpoint_every=0
          --set strategy.name=collab --set strategy.options.target_batch_size="${TARGET:-2048}"
          --set strategy.options.min_peers="$npeers" --set strategy.options.bootstrap_timeout=600
          --set strategy.options.listen=127.0.0.1 --set strategy.options.run_id="soak-$port"
          --set strategy.options.matchmaking_time=1 --set strategy.options.averaging_timeout=10
          --set strategy.options.verbose=true
          ${EXTRA_SET:-})

start() {  # start NAME [INITIAL]: sets $started to the peer's pid
  local name=$1 initial=${2:-} where=() wrap=()
  [[ -z $initial ]] && where=(--set strategy.options.port="$port")
  [[ $name == "p$wrap_peer" && -n ${WRAP:-} ]] && read -r -a wrap <<< "$WRAP"
  # exec: the pid is the peer's own (a subshell would hide it from /proc sampling)
  (LOOM_INITIAL_PEERS=$initial exec setsid "${prefix[@]}" "${wrap[@]}" "$loom" train "$config" "${set_opts[@]}" "${where[@]}" \
     --set trainer.output_dir="$out/$name" > "$out/$name.log" 2>&1) &
  started=$!
  pids+=("$started")
}

# The pid whose /proc to sample: the loom process itself (under WRAP, a child).
loom_pid() {
  local p=$1 c
  [[ $(readlink "/proc/$p/exe" 2>/dev/null) == *loom ]] && { echo "$p"; return; }
  for c in $(pgrep -P "$p" 2>/dev/null); do
    [[ $(readlink "/proc/$c/exe" 2>/dev/null) == *loom ]] && { echo "$c"; return; }
  done
  echo "$p"
}

start p1
peer_pids=("$started")
for _ in $(seq 600); do grep -q "listening on" "$out/p1.log" 2>/dev/null && break; sleep 0.1; done
grep -q "listening on" "$out/p1.log" || { echo "swarm_soak.sh: p1 did not start:"; tail -5 "$out/p1.log"; exit 1; }
for n in $(seq 2 "$npeers"); do start "p$n" "127.0.0.1:$port"; peer_pids+=("$started"); done

# A peer's DHT port: p1's is $port; the others print theirs.
dht_port() {
  grep -o "listening on 127\.0\.0\.1:[0-9]*" "$out/p$1.log" 2>/dev/null | head -1 | grep -o "[0-9]*$" || true
}
if awk "BEGIN { exit !($junk_rate > 0) }"; then
  for j in $junk_peers; do
    jp=""
    for _ in $(seq 3000); do jp=$(dht_port "$j"); [[ -n $jp ]] && break; sleep 0.1; done
    [[ -n $jp ]] || { echo "swarm_soak.sh: no DHT port for p$j"; exit 1; }
    python3 - "$jp" "$junk_rate" "$junk_kind" "$j" "${JUNK_SECONDS:-$duration}" > "$out/junk-p$j.log" 2>&1 <<'PY' &
import os, random, socket, sys, time
port, rate, kind = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
rng = random.Random(int(sys.argv[4]))
one = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sent, t0 = 0, time.monotonic()
while time.monotonic() - t0 < float(sys.argv[5]):
    data = rng.randbytes(rng.randint(1, 1400))
    if kind == "ports":
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(data, ("127.0.0.1", port)); s.close()
    else:
        one.sendto(data, ("127.0.0.1", port))
    sent += 1
    if sent % 1000 == 0: print(f"{time.monotonic() - t0:.0f} s: {sent} datagrams", flush=True)
    delay = t0 + sent / rate - time.monotonic()
    if delay > 0: time.sleep(delay)
print(f"stopped after {sent} datagrams", flush=True)
PY
    pids+=("$!")
    echo "junk UDP: $junk_rate/s ($junk_kind) against p$j's DHT port $jp"
  done
fi

echo "soak: $npeers peers, $duration s, samples every $interval s into $csv (logs in $out)"
header="t_s"
for n in $(seq 1 "$npeers"); do header+=",p${n}_rss_kb,p${n}_hwm_kb"; done
echo "$header" > "$csv"
sample() {
  local row=$1 n p rss hwm
  for n in $(seq 1 "$npeers"); do
    p=$(loom_pid "${peer_pids[$((n - 1))]}")
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$p/status" 2>/dev/null || true)
    hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$p/status" 2>/dev/null || true)
    row+=",${rss:-},${hwm:-}"
  done
  echo "$row" >> "$csv"
}
t0=$(date +%s)
while :; do
  now=$(( $(date +%s) - t0 ))
  sample "$now"
  (( now >= duration )) && break
  for p in "${peer_pids[@]}"; do
    kill -0 "$p" 2>/dev/null || { echo "swarm_soak.sh: a peer exited early:"; tail -n 5 "$out"/p*.log; exit 1; }
  done
  sleep $(( interval - ($(date +%s) - t0) % interval )) & wait $!  # a signal's trap runs at once
done
for n in $(seq 1 "$npeers"); do
  echo "p$n: $(grep -c "averaged gradients" "$out/p$n.log" || true) averaged rounds, $(grep -c "proceeding with local" "$out/p$n.log" || true) local steps"
done

report "$csv"
