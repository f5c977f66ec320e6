#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Step overhead of loom.Optimizer between averaging rounds (issue 18).

    PYTHONPATH=build/python /usr/bin/python3 bench/python_step_overhead.py [--steps 2000] [--reps 5]

A Python loop (digits MLP, batch 32, 1 thread) times its steps with
loom.Optimizer in a swarm of one whose target is never reached (every step
only accumulates: after_backward, no round), against the same loop with the
bare AdamW, alternated REPS times in one run. Prints the median of each and
the ratio; the target is at most 1.05 (5% slower). Since an accumulating
step skips the optimizer, it also times a loop that only accumulates
(forward and backward, no step): the ratio to that is loom's own cost."""
import argparse
import statistics
import time
import uuid

import torch
from torch import nn

import loom


def model_and_data():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))
    x = torch.rand(4096, 64)
    y = torch.randint(0, 10, (4096,))
    return m, x, y


def loop(step, zero, m, x, y, steps):
    g = torch.Generator().manual_seed(0)
    start = time.perf_counter()
    for _ in range(steps):
        idx = torch.randint(0, len(y), (32,), generator=g)
        nn.functional.cross_entropy(m(x[idx]), y[idx]).backward()
        step()
        zero()
    return (time.perf_counter() - start) / steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    bare_m, x, y = model_and_data()
    bare = torch.optim.AdamW(bare_m.parameters(), lr=1e-3)
    loom_m, _, _ = model_and_data()
    wrapped = loom.Optimizer(torch.optim.AdamW(loom_m.parameters(), lr=1e-3), model=loom_m, batch_size_per_step=32,
                             run_id=f"bench-{uuid.uuid4().hex[:8]}", target_batch_size=1 << 40, listen="127.0.0.1")
    acc_m, _, _ = model_and_data()
    t_bare, t_loom, t_acc = [], [], []
    for _ in range(args.reps):
        t_bare.append(loop(bare.step, bare.zero_grad, bare_m, x, y, args.steps))
        t_loom.append(loop(wrapped.step, wrapped.zero_grad, loom_m, x, y, args.steps))
        t_acc.append(loop(lambda: None, lambda: None, acc_m, x, y, args.steps))
    wrapped.shutdown()
    b, w, a = statistics.median(t_bare), statistics.median(t_loom), statistics.median(t_acc)
    print(f"bare AdamW step:                    {b * 1e6:8.1f} us (median of {args.reps} x {args.steps} steps)")
    print(f"loom.Optimizer step (accumulating): {w * 1e6:8.1f} us")
    print(f"accumulation alone (no step):       {a * 1e6:8.1f} us")
    print(f"ratio loom/bare: {w / b:.3f}  (target <= 1.05)")
    print(f"ratio loom/accumulation alone: {w / a:.3f}  (loom's own cost per step: {(w - a) * 1e6:.1f} us)")


if __name__ == "__main__":
    main()
