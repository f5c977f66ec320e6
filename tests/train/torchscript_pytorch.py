#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Trains a TorchScript module with PyTorch itself, as Loom's `torchscript`
task does, from what `loom train --dump-init DIR` wrote (the trainer settings
and the sample order), and writes the final weights and each step's loss.

    torchscript_pytorch.py DUMP_DIR MODULE TRAIN_DATA OUT_DIR
        [--inputs x [y ...]] [--loss cross_entropy|mse|bce_with_logits|module] [--target y]

The initial weights are the module's own (checked against the dump). The
module trains in train() mode, so BatchNorm uses batch statistics. Only
sgd/adam/adamw with a constant learning rate, no warm-up, clipping or
accumulation are supported. OUT_DIR/manifest.json holds {"params": [...],
"buffers": [...], "losses": [...]} with param%d.bin float32 files (the
trainable parameters) and buffer%d.bin files (the buffers in their own dtype,
such as BatchNorm's running statistics), as teacher_pytorch.py writes."""
import os

# One BLAS thread, as `loom train` with threads = 1 sets: OpenBLAS splits a
# matrix product differently across threads, which changes its rounding. It
# reads this once, when torch loads it.
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import argparse
import json
import sys

import torch
import torch.nn.functional as F

DTYPES = {"Float": torch.float32, "Long": torch.int64}
# c10's names, which Loom's dumps use.
DTYPE_NAMES = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.int64: "Long",
               torch.int32: "Int", torch.bool: "Bool", torch.uint8: "Byte", torch.int8: "Char"}


def load(dump, entry):
    raw = open(os.path.join(dump, entry["file"]), "rb").read()
    return torch.frombuffer(bytearray(raw), dtype=DTYPES[entry["dtype"]]).reshape(entry["shape"])


def load_data(path):
    """A torch.save dict of tensors, or a folder of such shards in name order."""
    if not os.path.isdir(path):
        return torch.load(path)
    shards = [torch.load(os.path.join(path, f)) for f in sorted(os.listdir(path)) if f.endswith(".pt")]
    return {k: torch.cat([s[k] for s in shards]) for k in shards[0]}


def loss_of(args, module, batch):
    out = module(*[batch[name] for name in args.inputs])
    if args.loss == "module":
        return out
    target = batch[args.target]
    if args.loss == "cross_entropy":  # class scores in the last dimension, [N, C] or [B, T, V]
        return F.cross_entropy(out.reshape(-1, out.size(-1)), target.reshape(-1).long())
    if args.loss == "mse":
        return F.mse_loss(out, target.to(out.dtype))
    return F.binary_cross_entropy_with_logits(out, target.to(out.dtype))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dump")
    parser.add_argument("module")
    parser.add_argument("train_data")
    parser.add_argument("out")
    parser.add_argument("--inputs", nargs="+", default=["x"])
    parser.add_argument("--loss", default="cross_entropy", choices=["cross_entropy", "mse", "bce_with_logits", "module"])
    parser.add_argument("--target", default="y")
    parser.add_argument("--jit-optimize", action="store_true",
                        help="as the task's jit_optimize: TorchScript's graph optimisations on (off by default, as in Loom)")
    args = parser.parse_args()
    # The same executor mode as the Loom run: its optimised graphs round
    # differently, and Adam turns roundoff in near-zero gradients into steps.
    torch._C._set_graph_executor_optimize(args.jit_optimize)
    torch.set_num_threads(1)

    manifest = json.load(open(os.path.join(args.dump, "manifest.json")))
    t = manifest["trainer"]
    if t["schedule"] != "constant" or t["warmup_steps"] or t["grad_clip"] or t["accumulate"] != 1:
        sys.exit("torchscript_pytorch.py: only a constant lr without warm-up, clipping or accumulation is supported")
    module = torch.jit.load(args.module)
    module.train()
    # Frozen parameters (requires_grad False) are state that Loom keeps with the buffers.
    params = {name: p for name, p in module.named_parameters() if p.requires_grad}
    # Loom must start from the module's own weights: a mismatch is a bug there, not here.
    for p in manifest.get("params", []):
        if p["name"] not in params or not torch.equal(load(args.dump, p), params[p["name"]].detach()):
            sys.exit("torchscript_pytorch.py: the dump's initial %s differs from the module's" % p["name"])
    data = load_data(args.train_data)
    batches = load(args.dump, manifest["batches"])
    if t["optimizer"] == "sgd":
        opt = torch.optim.SGD(params.values(), lr=t["lr"], momentum=t["momentum"], weight_decay=t["weight_decay"])
    elif t["optimizer"] == "adam":
        opt = torch.optim.Adam(params.values(), lr=t["lr"], weight_decay=t["weight_decay"])
    elif t["optimizer"] == "adamw":
        opt = torch.optim.AdamW(params.values(), lr=t["lr"], weight_decay=t["weight_decay"])
    else:
        sys.exit("torchscript_pytorch.py: unknown optimizer %s" % t["optimizer"])
    fields = args.inputs + ([] if args.loss == "module" else [args.target])
    losses = []
    for step in range(t["max_steps"]):
        idx = batches[step]
        loss = loss_of(args, module, {k: data[k][idx] for k in fields})
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())

    os.makedirs(args.out, exist_ok=True)
    entries = []
    for i, (name, tensor) in enumerate(params.items()):
        path = "param%d.bin" % i
        open(os.path.join(args.out, path), "wb").write(tensor.detach().contiguous().numpy().tobytes())
        entries.append({"name": name, "file": path, "shape": list(tensor.shape), "dtype": "Float"})
    # The buffers too (BatchNorm's running statistics and step count), in their own dtype, as Loom dumps them.
    buffers = []
    for i, (name, tensor) in enumerate(module.named_buffers()):
        path = "buffer%d.bin" % i
        open(os.path.join(args.out, path), "wb").write(tensor.detach().contiguous().numpy().tobytes())
        buffers.append({"name": name, "file": path, "shape": list(tensor.shape), "dtype": DTYPE_NAMES[tensor.dtype]})
    json.dump({"params": entries, "buffers": buffers, "losses": losses}, open(os.path.join(args.out, "manifest.json"), "w"))


if __name__ == "__main__":
    main()
