#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A Python peer's averaging round against a `loom train` peer's (issue 18).

    PYTHONPATH=build/python /usr/bin/python3 bench/python_round_time.py [--epochs 60] [--hidden 512]

Runs, one after the other on this machine, a swarm of 2 `loom train` peers
(torchscript task) and a swarm of 2 Python peers (loom.Optimizer) on the
same TorchScript MLP and data, and reads each round's time from the
plugin's own log ("averaging N ms"). Prints the median round of each and
the ratio; the target is within 10% (ratio at most 1.10)."""
import argparse
import os
import re
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


ROUND = re.compile(r"averaging (\d+) ms")


def rounds(text):
    return [int(m) for m in ROUND.findall(text)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=60)
    ap.add_argument("--hidden", type=int, default=512, help="the MLP's width (rounds move 4 x its square bytes)")
    args = ap.parse_args()
    loom_bin = os.environ.get("LOOM_BIN", os.path.join(HERE, "..", "build", "bin", "loom"))
    with tempfile.TemporaryDirectory(prefix="loom-round-bench-") as scratch:
        x, y, _, _ = digits_split()
        torch.manual_seed(0)
        h = args.hidden
        model = nn.Sequential(nn.Linear(64, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 10))
        torch.jit.script(model).save(os.path.join(scratch, "mlp.pt"))
        torch.save({"x": x, "y": y}, os.path.join(scratch, "train.pt"))

        # Two loom train peers.
        rid, port = pyswarm.run_id("bench-cxx"), pyswarm.free_port()
        procs = []
        for i in range(2):
            cfg = os.path.join(scratch, f"cxx{i}.toml")
            where = {"port": port} if i == 0 else {"initial_peers": [f"127.0.0.1:{port}"]}
            pyswarm.torchscript_collab_config(cfg, scratch=scratch, out=f"{scratch}/out{i}", run_id=rid,
                                              epochs=args.epochs, lr=0.001, log_every=1000, min_peers=2, **where)
            procs.append(pyswarm.Process(f"cxx{i}", [loom_bin, "train", cfg], scratch))
        for p in procs:
            if p.wait(600) != 0:
                sys.exit(p.tail())
        cxx = [r for p in procs for r in rounds(p.log())]

        # Two Python peers on the same model (its parameters named as loom train names them).
        rid, port = pyswarm.run_id("bench-py"), pyswarm.free_port()
        script = f"""
import logging, sys, torch, loom
logging.basicConfig(level=logging.INFO)
from torch import nn
sys.path.insert(0, {TESTS!r})
from digits_data import digits_split
x, y, _, _ = digits_split()
model = torch.jit.load({os.path.join(scratch, 'mlp.pt')!r})
opt = loom.Optimizer(torch.optim.AdamW(model.parameters(), lr=1e-3), model=model, batch_size_per_step=32,
                     run_id={rid!r}, target_batch_size=256, listen="127.0.0.1", min_peers=2, verbose=True,
                     max_steps={args.epochs}, port=int(sys.argv[1]))
torch.set_num_threads(1)
g = torch.Generator().manual_seed(int(sys.argv[2]))
while opt.local_epoch < {args.epochs}:
    idx = torch.randint(0, len(y), (32,), generator=g)
    nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
    opt.step()
    opt.zero_grad()
opt.shutdown()
"""
        py = []
        for i in range(2):
            env = {} if i == 0 else {"LOOM_INITIAL_PEERS": f"127.0.0.1:{port}"}
            py.append(pyswarm.Process(f"py{i}", [sys.executable, "-c", script, str(port if i == 0 else 0), str(i)],
                                      scratch, env))
        for p in py:
            if p.wait(600) != 0:
                sys.exit(p.tail())
        pyr = [r for p in py for r in rounds(p.log())]
    if not cxx or not pyr:
        sys.exit(f"no rounds read: loom train {len(cxx)}, Python {len(pyr)}")
    c, p = statistics.median(cxx), statistics.median(pyr)
    params = 64 * h + h + h * h + h + h * 10 + 10
    print(f"model: {params} parameters ({params * 4 / 2**20:.2f} MiB per round); {args.epochs} epochs, 2 peers each")
    print(f"loom train peers' round: median {c:.1f} ms over {len(cxx)} rounds")
    print(f"Python peers' round:     median {p:.1f} ms over {len(pyr)} rounds")
    print(f"ratio Python/loom train: {p / c:.3f}  (target <= 1.10)")


if __name__ == "__main__":
    main()
