#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the two example models of Loom's `torchscript` task and their data.

    /usr/bin/python3 examples/own-model/export.py [--out runs/own] [--shards N] [--text FILE] [--seed S]

DigitsCNN: a small CNN with BatchNorm on the 8x8 digits Debian's python3-sklearn
ships (digits_cnn.pt, digits_train.pt, digits_val.pt; plain cross-entropy).
TinyGPT: a byte-level GPT that returns its own mean loss (gpt.pt, gpt_train.pt,
gpt_val.pt; `loss = "module"`). Each model is saved with
torch.jit.script(model).save(path); its saved weights are the run's initial
weights. Data files are torch.save({"x": ..., "y": ...}) dicts; --shards N also
writes each training set as a folder of N shard files.

The classes and data builders are importable (the benchmark and tests reuse
them): `from export import DigitsCNN, TinyGPT, digits_data, text_data`."""
import argparse
import gzip
import math
import os

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

DIGITS_CSV = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"
# base-files puts the licence texts on every Debian system; GPL-3 is ~35 KB.
DEFAULT_TEXT = "/usr/share/common-licenses/GPL-3"


class DigitsCNN(nn.Module):
    """x float32 [N, 1, 8, 8] in [0, 1] -> class scores [N, 10]."""

    def __init__(self):
        super().__init__()
        # No bias before a BatchNorm: it would be subtracted again at once, so
        # its gradient is zero up to rounding, and Adam turns that rounding
        # noise into full-size steps of a parameter that means nothing.
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
            nn.MaxPool2d(2))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, 10))

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.features(x))


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.heads = heads
        self.head_dim = d_model // heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: Tensor) -> Tensor:
        b, t, c = x.size(0), x.size(1), x.size(2)
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(b, t, self.heads, self.head_dim).transpose(1, 2)
        v = v.view(b, t, self.heads, self.head_dim).transpose(1, 2)
        att = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        # The mask is built per call rather than kept as a buffer: the module then
        # has no bool state for a trainer's checkpoint to carry.
        future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        att = F.softmax(att.masked_fill(future, float("-inf")), dim=-1)
        y = torch.matmul(att, v).transpose(1, 2).reshape(b, t, c)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """Byte-level GPT: forward(x int64 [B, T], y int64 [B, T]) -> mean cross-entropy
    of predicting y (x shifted by one) — it returns its loss (`loss = "module"`)."""

    def __init__(self, vocab: int = 256, context: int = 32, d_model: int = 64, layers: int = 2, heads: int = 4):
        super().__init__()
        self.vocab = vocab
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(context, d_model)
        self.blocks = nn.Sequential(*[Block(d_model, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)
        # GPT-2's small normal init: PyTorch's N(0, 1) embeddings make a slow start.
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        positions = torch.arange(x.size(1), device=x.device)
        h = self.ln(self.blocks(self.tok(x) + self.pos(positions)))
        logits = self.head(h)
        return F.cross_entropy(logits.reshape(-1, self.vocab), y.reshape(-1))


def digits_data(seed: int = 0, val_fraction: float = 0.2):
    """(train, val) dicts of x float32 [N, 1, 8, 8] in [0, 1] and y int64 [N],
    split by a permutation drawn from seed (no sklearn import needed)."""
    with gzip.open(DIGITS_CSV, "rt") as f:
        rows = np.loadtxt(f, delimiter=",", dtype=np.float32)
    x = torch.from_numpy(rows[:, :64] / 16.0).reshape(-1, 1, 8, 8)
    y = torch.from_numpy(rows[:, 64].astype(np.int64))
    order = torch.from_numpy(np.random.RandomState(seed).permutation(len(rows)))
    n_val = int(round(len(rows) * val_fraction))
    val, train = order[:n_val], order[n_val:]
    return {"x": x[train].clone(), "y": y[train].clone()}, {"x": x[val].clone(), "y": y[val].clone()}


def text_data(path: str = DEFAULT_TEXT, context: int = 32, stride: int = 8, val_fraction: float = 0.1):
    """(train, val) dicts of byte windows x int64 [N, context] and y = x shifted
    by one. The last val_fraction of the text is held out whole, so no
    validation window overlaps a training one."""
    data = torch.tensor(list(open(path, "rb").read()), dtype=torch.int64)
    cut = int(len(data) * (1 - val_fraction))

    def windows(part: Tensor, step: int):
        w = part.unfold(0, context + 1, step)  # [N, context + 1]
        return {"x": w[:, :-1].clone(), "y": w[:, 1:].clone()}

    return windows(data[:cut], stride), windows(data[cut:], context)


def save_shards(data: dict, folder: str, shards: int):
    """A folder of `shards` files holding consecutive rows, named in order."""
    os.makedirs(folder, exist_ok=True)
    for old in os.listdir(folder):  # a stale shard from a bigger --shards would be read too
        if old.endswith(".pt"):
            os.remove(os.path.join(folder, old))
    n = next(iter(data.values())).size(0)
    bounds = np.linspace(0, n, shards + 1).astype(int)
    for i in range(shards):
        # clone(): torch.save writes a view's whole storage, not just its rows.
        part = {k: v[bounds[i]:bounds[i + 1]].clone() for k, v in data.items()}
        torch.save(part, os.path.join(folder, "shard-%05d.pt" % i))


def describe(data: dict) -> str:
    return ", ".join("%s %s %s" % (k, str(v.dtype).replace("torch.", ""), list(v.shape)) for k, v in data.items())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/own", help="output folder (default: runs/own)")
    parser.add_argument("--shards", type=int, default=0, help="also write each training set as a folder of N shards")
    parser.add_argument("--text", default=DEFAULT_TEXT, help="text file for TinyGPT (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the initial weights and the digits split")
    args = parser.parse_args()
    if not os.path.isfile(args.text):
        parser.error("no text file %s: pass --text FILE" % args.text)
    os.makedirs(args.out, exist_ok=True)

    def write(name, obj):
        path = os.path.join(args.out, name)
        if isinstance(obj, torch.jit.ScriptModule):
            obj.save(path)
            print("wrote %s (%d parameters)" % (path, sum(p.numel() for p in obj.parameters())))
        else:
            torch.save(obj, path)
            print("wrote %s (%s)" % (path, describe(obj)))

    sets = {}
    torch.manual_seed(args.seed)
    write("digits_cnn.pt", torch.jit.script(DigitsCNN()))
    sets["digits"] = digits_data(args.seed)
    torch.manual_seed(args.seed)
    write("gpt.pt", torch.jit.script(TinyGPT()))
    sets["gpt"] = text_data(args.text)
    for name, (train, val) in sets.items():
        write(name + "_train.pt", train)
        write(name + "_val.pt", val)
        if args.shards > 0:
            folder = os.path.join(args.out, name + "_train_shards")
            save_shards(train, folder, args.shards)
            print("wrote %s/ (%d shards)" % (folder, args.shards))


if __name__ == "__main__":
    main()
