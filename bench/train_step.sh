#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The trainer benchmark of the trainer issue, in one run: steps per second of
# charlm at about 10 M parameters with `single`, with `ddp` over the MPI
# collective plugin, and with LibTorch's c10d::ProcessGroupGloo averaging the
# same gradients, on 2 ranks (see bench/train_step.cpp for how each is timed).
# Usage: bench/train_step.sh [build-dir] [loom_bench_train_step options...]
#   RANKS=2 (ranks), MPIRUN_ARGS="..." (extra mpirun arguments)
set -euo pipefail
build=${1:-build}
shift $(( $# > 0 ? 1 : 0 ))
bin=$build/bin/loom_bench_train_step
[[ -x $bin ]] || { echo "train_step.sh: $bin is missing; build the target loom_bench_train_step" >&2; exit 2; }

# The text: the GPL-3 eight times over (~280 KB), or whatever licences exist.
text=$(mktemp --suffix=.txt)
trap 'rm -f "$text"' EXIT
source=/usr/share/common-licenses/GPL-3
for _ in 1 2 3 4 5 6 7 8; do
  if [[ -r $source ]]; then cat "$source"; else cat /usr/share/common-licenses/* 2>/dev/null || true; fi
done > "$text"
[[ -s $text ]] || { echo "train_step.sh: no text to train on (wanted $source)" >&2; exit 2; }

mpirun=(mpirun --oversubscribe -np "${RANKS:-2}")
[[ $(id -u) -eq 0 ]] && mpirun+=(--allow-run-as-root)
# shellcheck disable=SC2206
mpirun+=(${MPIRUN_ARGS:-})
# The load average goes with every figure: 2 ranks on a 2-core machine time
# each other's cores too, so a run at a load well above the rank count is noise.
echo "# load before: $(uptime)"
echo "+ ${mpirun[*]} $bin --text $text $*"
"${mpirun[@]}" "$bin" --text "$text" "$@"
echo "# load after: $(uptime)"
