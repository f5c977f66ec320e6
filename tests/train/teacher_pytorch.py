#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Trains Loom's `teacher` task with PyTorch itself, from what
`loom train --dump-init DIR` wrote (initial weights, the training data and the
sample order), and writes the final weights to OUT in the same format.

    teacher_pytorch.py DUMP_DIR OUT_DIR

Only what the cross-check test uses is supported: the student
Sequential(Linear, Tanh, Linear), MSE loss, sgd/adam/adamw with a constant
learning rate, no gradient clipping or accumulation."""
import json
import os
import sys

import torch

DTYPES = {"Float": torch.float32, "Long": torch.int64}


def load(dump, entry):
    raw = open(os.path.join(dump, entry["file"]), "rb").read()
    return torch.frombuffer(bytearray(raw), dtype=DTYPES[entry["dtype"]]).reshape(entry["shape"])


def main(dump, out):
    manifest = json.load(open(os.path.join(dump, "manifest.json")))
    t = manifest["trainer"]
    if t["schedule"] != "constant" or t["warmup_steps"] or t["grad_clip"] or t["accumulate"] != 1:
        sys.exit("teacher_pytorch.py: only a constant lr without clipping or accumulation is supported")
    params = {p["name"]: load(dump, p) for p in manifest["params"]}
    inputs = params["0.weight"].shape[1]
    hidden = params["0.weight"].shape[0]
    model = torch.nn.Sequential(torch.nn.Linear(inputs, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1))
    model.load_state_dict(params)
    x, y = load(dump, manifest["input"]), load(dump, manifest["target"])
    batches = load(dump, manifest["batches"])
    if t["optimizer"] == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=t["lr"], momentum=t["momentum"], weight_decay=t["weight_decay"])
    elif t["optimizer"] == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=t["lr"], weight_decay=t["weight_decay"])
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=t["lr"], weight_decay=t["weight_decay"])
    for step in range(t["max_steps"]):
        idx = batches[step]
        loss = torch.nn.functional.mse_loss(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    os.makedirs(out, exist_ok=True)
    entries = []
    for i, (name, tensor) in enumerate(model.state_dict().items()):
        path = "param%d.bin" % i
        open(os.path.join(out, path), "wb").write(tensor.detach().contiguous().numpy().tobytes())
        entries.append({"name": name, "file": path, "shape": list(tensor.shape), "dtype": "Float"})
    json.dump({"params": entries}, open(os.path.join(out, "manifest.json"), "w"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
