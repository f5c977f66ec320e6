#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The `torchscript` task's benchmark, in one run: steps per second of
# examples/own-model's DigitsCNN (batch 64) and TinyGPT (batch 32), AdamW,
# one thread, trained (a) by `loom train` (strategy single), (b) by a PyTorch
# eager loop on the same nn.Module and (c) by a PyTorch loop on the scripted
# module Loom runs, with and without TorchScript's graph optimizations
# (bench/own_model_eager.py). Start-up is excluded: loom runs
# STEPS and 2*STEPS steps and the difference of the wall times is the time of
# STEPS steps; the Python loops time only the loop, after a warm-up. CPU
# time (user + system, all threads) is shown next to wall time: it tells
# whether a run kept to its one core. Run it on an idle machine: on 2 cores
# anything else running moves the figures by tens of percent.
# Usage: bench/own_model.sh [build-dir]
#   STEPS=200 (digits; TinyGPT runs STEPS/2), REPEAT=3 (best of REPEAT for each length),
#   EXTRA_SET=section.key=value (one more --set for loom, e.g. task.jit_optimize=true),
#   DEVICE=cpu|cuda (where both sides train; on a GPU machine, with PYTHON=python3
#   for its torch and the build folder of tests/gpu/run.sh: DEVICE=cuda
#   PYTHON=python3 bench/own_model.sh build-gpu/loom)
set -euo pipefail
build=${1:-build}
loom=$build/bin/loom
here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-/usr/bin/python3}
device=${DEVICE:-cpu}
steps=${STEPS:-200}
repeat=${REPEAT:-3}
[[ -x $loom ]] || { echo "own_model.sh: $loom is missing: build first" >&2; exit 2; }
"$python" -c 'import torch' 2> /dev/null || { echo "own_model.sh: $python has no torch (apt-get install python3-torch)" >&2; exit 2; }
# Debian's OpenBLAS (pthreads) starts a spinning thread per core that
# torch.set_num_threads(1) and trainer.threads = 1 do not stop: without
# these, every run below uses two cores for one. One core each, for both.
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$python" "$here/examples/own-model/export.py" --out "$out/data" > /dev/null

# config MODEL: a single-strategy config for MODEL that logs, validates and
# checkpoints as little as the trainer allows.
config() {
  local model=$1
  local cfg=$out/$model.toml
  if [[ $model == digits ]]; then
    task="module = \"$out/data/digits_cnn.pt\"
inputs = [\"x\"]
loss = \"cross_entropy\"
target = \"y\""
    batch=64 decay=0.0
  else
    task="module = \"$out/data/gpt.pt\"
inputs = [\"x\", \"y\"]
loss = \"module\""
    batch=32 decay=0.01
  fi
  cat > "$cfg" <<TOML
[trainer]
task = "torchscript"
max_steps = 1
batch_size = $batch
optimizer = "adamw"
lr = 0.003
weight_decay = $decay
seed = 0
threads = 1
device = "$device"
log_every = 1000000
val_every = 0
checkpoint_every = 0
output_dir = "$out/run-$model"
[task]
train = "$out/data/${model}_train.pt"
$task
TOML
  echo "$cfg"
}

# loom_runs MODEL CFG N: REPEAT runs of N steps, each one JSON line with its
# wall and CPU seconds (the table takes the best of each length).
loom_runs() {
  local times TIMEFORMAT='%3R %3U %3S'
  for _ in $(seq "$repeat"); do
    rm -rf "$out/run-$1"
    { time "$loom" train "$2" --set trainer.max_steps="$3" ${EXTRA_SET:+--set "$EXTRA_SET"} > "$out/loom.log" 2>&1; } 2> "$out/time" ||
      { echo "own_model.sh: loom train failed (does $loom have the torchscript task?):" >&2
        tail -n 20 "$out/loom.log" >&2; exit 1; }
    read -r -a times < "$out/time"
    echo "{\"model\": \"$1\", \"mode\": \"loom\", \"steps\": $3, \"seconds\": ${times[0]}," \
         "\"cpu_seconds\": $(echo "${times[1]} ${times[2]}" | "$python" -c 'print(sum(map(float, input().split())))')}"
  done
}

# The load average goes with the figures: on a 2-core machine anything else
# running shares the one core each run uses.
echo "# device: $device; load before: $(uptime)"
results=$out/results.jsonl
for model in digits gpt; do
  n=$steps
  [[ $model == gpt ]] && n=$(( steps / 2 ))
  cfg=$(config "$model")
  loom_runs "$model" "$cfg" "$n" >> "$results"
  loom_runs "$model" "$cfg" $(( 2 * n )) >> "$results"
  for mode in eager scripted noopt; do
    "$python" "$here/bench/own_model_eager.py" --model "$model" --mode "$mode" --data "$out/data" \
      --device "$device" --steps "$n" --repeat "$repeat" >> "$results"
  done
  # Eager again with the malloc settings loom train makes (freed memory stays
  # mapped), through glibc's tunables: like for like.
  GLIBC_TUNABLES=glibc.malloc.trim_threshold=268435456:glibc.malloc.mmap_threshold=33554432 \
    "$python" "$here/bench/own_model_eager.py" --model "$model" --mode eager --data "$out/data" \
      --device "$device" --steps "$n" --repeat "$repeat" | sed 's/"mode": "eager"/"mode": "eager_kept"/' >> "$results"
done
echo "# load after: $(uptime)"
"$python" - "$results" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
models, modes = ("digits", "gpt"), ("loom", "eager", "scripted", "noopt", "eager_kept")
for clock in ("seconds", "cpu_seconds"):
    rate = {(r["model"], r["mode"]): r["steps"] / r[clock] for r in rows if r["mode"] != "loom"}
    for model in models:
        best = {}  # steps -> best seconds
        for r in rows:
            if r["model"] == model and r["mode"] == "loom":
                best[r["steps"]] = min(best.get(r["steps"], float("inf")), r[clock])
        short, long = sorted(best)
        # Start-up (loading, the first calls' optimization, the final checkpoint) cancels out.
        extra = best[long] - best[short]
        rate[(model, "loom")] = (long - short) / extra if extra > 0 else float("nan")  # nan: noise, rerun when idle
        print(f"# loom {model}, {clock}: {short} steps {best[short]:.2f}, {long} steps {best[long]:.2f}")
    # noopt: the scripted module with torch._C._set_graph_executor_optimize(False).
    print(f"{'model':8} {'loom':>8} {'eager':>8} {'scripted':>8} {'noopt':>8} {'eager_kept':>10}   {'loom/eager':>10}"
          f" {'loom/scripted':>13} {'loom/eager_kept':>15}"
          f"   (steps per {'wall' if clock == 'seconds' else 'CPU'} second, 1 thread)")
    for model in models:
        l, e, s, n, k = (rate[(model, m)] for m in modes)
        print(f"{model:8} {l:8.1f} {e:8.1f} {s:8.1f} {n:8.1f} {k:10.1f}   {l / e:10.2f} {l / s:13.2f} {l / k:15.2f}")
PY
