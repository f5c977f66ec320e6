#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A Python peer's averaging round against a `loom train` peer's (issue 18).

    PYTHONPATH=build/python /usr/bin/python3 bench/python_round_time.py [--epochs 40] [--hidden 1024] [--reps 3]

Runs, alternately on this machine, swarms of 2 `loom train` peers
(torchscript task) and swarms of 2 Python peers (loom.Optimizer over
torch.optim.AdamW) on the same TorchScript MLP and data, --reps times each.
Each round's time comes from the plugin's own verbose line: from the moment
the group met (every member's weight known) to the next window, that is the
gradients' allreduce, the host's optimizer step (LibTorch's in `loom train`,
torch.optim's in Python) and any parameter averaging. Nothing in that span
waits for a slower partner, so the two front ends' figures differ only by
what the front end does. Epoch 0 (warm-up) and the rounds that also average
parameters (state averaging, the last epoch) are shown apart. Prints the
median round of each and the ratio; the target is within 10% (ratio at
most 1.10)."""
import argparse
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(HERE, "..", "tests", "python")
sys.path.insert(0, TESTS)

import torch  # noqa: E402
from torch import nn  # noqa: E402

import pyswarm  # noqa: E402
from digits_data import digits_split  # noqa: E402


def swarm(procs, what):
    for p in procs:
        if p.wait(600) != 0:
            sys.exit(f"{what}: {p.name} failed\n{p.tail()}")
    found = [r for p in procs for r in pyswarm.round_lines(p.log())]
    if not found:
        sys.exit(f"{what}: no round line read from the peers' logs (has the plugin's round line changed?)\n"
                 f"{procs[0].tail()}")
    return found


def cxx_swarm(scratch, loom_bin, epochs, tag):
    rid, port = pyswarm.run_id(f"bench-cxx-{tag}"), pyswarm.free_port()
    procs = []
    for i in range(2):
        cfg = os.path.join(scratch, f"cxx{tag}-{i}.toml")
        where = {"port": port} if i == 0 else {"initial_peers": [f"127.0.0.1:{port}"]}
        pyswarm.torchscript_collab_config(cfg, scratch=scratch, out=f"{scratch}/out{tag}-{i}", run_id=rid,
                                          epochs=epochs, lr=0.001, log_every=1000, min_peers=2, **where)
        procs.append(pyswarm.Process(f"cxx{tag}-{i}", [loom_bin, "train", cfg], scratch))
    return swarm(procs, "loom train swarm")


PY_PEER = """
import logging, sys, torch, loom
logging.basicConfig(level=logging.INFO)
from torch import nn
sys.path.insert(0, sys.argv[4])
from digits_data import digits_split
x, y, _, _ = digits_split()
model = torch.jit.load(sys.argv[3])
epochs = int(sys.argv[5])
opt = loom.Optimizer(torch.optim.AdamW(model.parameters(), lr=1e-3), model=model, batch_size_per_step=32,
                     run_id=sys.argv[6], target_batch_size=256, listen="127.0.0.1", min_peers=2, verbose=True,
                     max_steps=epochs, port=int(sys.argv[1]))
torch.set_num_threads(1)
g = torch.Generator().manual_seed(int(sys.argv[2]))
while opt.local_epoch < epochs:
    idx = torch.randint(0, len(y), (32,), generator=g)
    nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
    opt.step()
    opt.zero_grad()
opt.shutdown()
"""


def python_swarm(scratch, epochs, tag):
    rid, port = pyswarm.run_id(f"bench-py-{tag}"), pyswarm.free_port()
    procs = []
    for i in range(2):
        env = {} if i == 0 else {"LOOM_INITIAL_PEERS": f"127.0.0.1:{port}"}
        argv = [sys.executable, "-c", PY_PEER, str(port if i == 0 else 0), str(i), os.path.join(scratch, "mlp.pt"),
                TESTS, str(epochs), rid]
        procs.append(pyswarm.Process(f"py{tag}-{i}", argv, scratch, env))
    return swarm(procs, "Python swarm")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--hidden", type=int, default=1024,
                    help="the MLP's width (about its square parameters; 1024: 1.1 M, 4.3 MiB a round)")
    ap.add_argument("--reps", type=int, default=3, help="swarms of each front end, run alternately")
    args = ap.parse_args()
    if args.epochs < 3 or args.hidden < 1 or args.reps < 1:
        ap.error("--epochs must be at least 3, --hidden and --reps at least 1")
    loom_bin = os.environ.get("LOOM_BIN", os.path.join(HERE, "..", "build", "bin", "loom"))
    with tempfile.TemporaryDirectory(prefix="loom-round-bench-") as scratch:
        x, y, _, _ = digits_split()
        torch.manual_seed(0)
        h = args.hidden
        model = nn.Sequential(nn.Linear(64, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 10))
        torch.jit.script(model).save(os.path.join(scratch, "mlp.pt"))
        torch.save({"x": x, "y": y}, os.path.join(scratch, "train.pt"))
        cxx, py = [], []
        for rep in range(args.reps):
            cxx.append(cxx_swarm(scratch, loom_bin, args.epochs, rep))
            py.append(python_swarm(scratch, args.epochs, rep))
    params = 64 * h + h + h * h + h + h * 10 + 10
    print(f"model: {params} parameters ({params * 4 / 2**20:.2f} MiB a round); {args.epochs} epochs, 2 peers a swarm, "
          f"{args.reps} swarm(s) of each front end, alternated")

    def plain(runs):  # every peer's rounds past warm-up that averaged gradients only
        return [r for run in runs for r in run if r[0] > 0 and not r[5]]

    med = statistics.median
    for name, runs in (("loom train", cxx), ("Python", py)):
        rs = plain(runs)
        per_rep = ", ".join("{:.1f} ({:.1f} + {:.1f})".format(*(med([r[i] for r in run if r[0] > 0 and not r[5]]
                                                                  or [float("nan")]) for i in (1, 2, 3)))
                            for run in runs)
        print(f"{name + ' peers:':18} round median {med([r[1] for r in rs]):7.2f} ms over {len(rs)} rounds "
              f"(per swarm, with gradients + optimizer step: {per_rep}); gradients {med([r[2] for r in rs]):.2f} ms, optimizer step "
              f"{med([r[3] for r in rs]):.2f} ms")
        sync = [r[1] for run in runs for r in run if r[5]]
        if sync:
            print(f"{'':18} with parameter averaging: median {med(sync):.2f} ms over {len(sync)} rounds")
    c, p = med([r[1] for r in plain(cxx)]), med([r[1] for r in plain(py)])
    print(f"ratio Python/loom train (round median): {p / c:.3f}  (target <= 1.10)")


if __name__ == "__main__":
    main()
