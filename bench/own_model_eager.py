#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The PyTorch side of bench/own_model.sh: steps per second of training one of
examples/own-model's models with a plain PyTorch loop: eager (the nn.Module
from export.py), scripted (the exported TorchScript file, what Loom runs), or
noopt (scripted, with the graph executor's optimizations off: no profiling
runs, no differentiable graphs, autograd as in eager mode).

    own_model_eager.py --model digits|gpt --mode eager|scripted|noopt --data DIR [--device cpu|cuda]
                       [--steps N] [--repeat R]

DIR is what export.py wrote. Each step does what a `loom train` step does:
gather a random batch, forward, loss, backward, optimizer step, read the loss.
Start-up and WARMUP steps (TorchScript's profiling executor optimizes after
its first calls) are not timed; prints one JSON line with the best wall
time and the best CPU time (this process, all threads) of R loops of N steps."""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.dont_write_bytecode = True  # no __pycache__ left in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "own-model"))
from export import DigitsCNN, TinyGPT  # noqa: E402

WARMUP = 20
# Each model as its configs train it: (class, file, inputs, batch size, weight decay).
MODELS = {"digits": (DigitsCNN, "digits_cnn.pt", ["x"], 64, 0.0),
          "gpt": (TinyGPT, "gpt.pt", ["x", "y"], 32, 0.01)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=MODELS, required=True)
    parser.add_argument("--mode", choices=["eager", "scripted", "noopt"], required=True)
    parser.add_argument("--data", required=True, help="folder export.py wrote")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.003)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N: where model and data live")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    if args.mode == "noopt":
        torch._C._set_graph_executor_optimize(False)  # LibTorch: torch::jit::setGraphExecutorOptimize(false)

    cls, file, inputs, batch, weight_decay = MODELS[args.model]
    scripted = torch.jit.load(os.path.join(args.data, file), map_location=device)
    if args.mode == "eager":
        model = cls()
        model.load_state_dict(scripted.state_dict())  # the same weights, so the same work
    else:
        model = scripted
    model.to(device)
    model.train()
    data = {k: v.to(device) for k, v in torch.load(os.path.join(args.data, args.model + "_train.pt")).items()}
    n = data["x"].size(0)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=weight_decay)

    def step():
        idx = torch.randint(n, (batch,), device=device)
        b = {k: v[idx] for k, v in data.items()}
        out = model(*[b[k] for k in inputs])
        loss = out if args.model == "gpt" else F.cross_entropy(out, b["y"])
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(WARMUP):
        step()
    wall = cpu = float("inf")
    for _ in range(args.repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        for _ in range(args.steps):
            step()
        wall = min(wall, time.perf_counter() - start)
        cpu = min(cpu, time.process_time() - start_cpu)
    print(json.dumps({"model": args.model, "mode": args.mode, "steps": args.steps, "seconds": wall,
                      "cpu_seconds": cpu}))


if __name__ == "__main__":
    main()
