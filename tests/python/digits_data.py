# SPDX-License-Identifier: Apache-2.0
"""The digits data (Debian's python3-sklearn) and MLP the Python tests train.

With a folder written by `loom train ... --dump-init DIR` of the digits
task, the Python tests train exactly what that run trained: its training
split (input.bin, target.bin), the rest of the data as the test split, and
its initial weights."""
import json
import os

import numpy as np
import torch
from torch import nn


def _all_digits():
    from sklearn.datasets import load_digits
    d = load_digits()
    return torch.tensor(d.data, dtype=torch.float32) / 16.0, torch.tensor(d.target, dtype=torch.long)


def _read(folder, entry):
    dtype = {"Float": np.float32, "Long": np.int64}[entry["dtype"]]
    return torch.from_numpy(np.fromfile(os.path.join(folder, entry["file"]), dtype=dtype).reshape(entry["shape"]))


def digits_split(dump=None):
    """(x, y, test_x, test_y): every fifth image held out, or the split of
    the `loom train` run that dumped `dump`."""
    x, y = _all_digits()
    if dump is None:
        test = torch.arange(len(y)) % 5 == 0
        return x[~test], y[~test], x[test], y[test]
    with open(os.path.join(dump, "manifest.json")) as f:
        manifest = json.load(f)
    tx, ty = _read(dump, manifest["input"]), _read(dump, manifest["target"])
    # Both parts keep the file's order: the training rows are a subsequence.
    held = torch.ones(len(y), dtype=torch.bool)
    j = 0
    for i in range(len(y)):
        if j < len(ty) and y[i] == ty[j] and torch.equal(x[i], tx[j]):
            held[i] = False
            j += 1
    if j != len(ty):
        raise ValueError(f"{dump}: its training rows are not a subsequence of sklearn's digits")
    return tx, ty, x[held], y[held]


def make_model(seed=0, hidden=128, dump=None):
    """The digits task's MLP; with dump, with that run's initial weights."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    if dump is not None:
        with open(os.path.join(dump, "manifest.json")) as f:
            manifest = json.load(f)
        state = {p["name"]: _read(dump, p) for p in manifest["params"]}
        model.load_state_dict(state)
    return model


def accuracy(model, x, y):
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()
