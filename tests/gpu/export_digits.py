#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the own-model example's DigitsCNN and its data for tests/gpu/run.sh.

    python3 tests/gpu/export_digits.py DIGITS_CSV_GZ OUT_DIR

The same files as examples/own-model/export.py (digits_cnn.pt, digits_train.pt,
digits_val.pt), but from a given copy of digits.csv.gz (a GPU machine has no
Debian python3-sklearn) and with the local torch, so that the TorchScript file
matches the LibTorch Loom was built against. export.py needs numpy; where it
is missing, its DigitsCNN class is taken from the file and the CSV read plainly."""
import ast
import gzip
import os
import sys

import torch

EXPORT_PY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "own-model", "export.py")


def plain_digits_data(csv, seed=0, val_fraction=0.2):
    with gzip.open(csv, "rt") as f:
        rows = torch.tensor([[float(v) for v in line.split(",")] for line in f if line.strip()])
    x = (rows[:, :64] / 16.0).reshape(-1, 1, 8, 8)
    y = rows[:, 64].long()
    order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(seed))
    n_val = int(round(len(rows) * val_fraction))
    val, train = order[:n_val], order[n_val:]
    return {"x": x[train].clone(), "y": y[train].clone()}, {"x": x[val].clone(), "y": y[val].clone()}


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("\n\n")[1].strip())
    csv, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    try:
        sys.path.insert(0, os.path.dirname(EXPORT_PY))
        import export
        export.DIGITS_CSV = csv
        model_class, data = export.DigitsCNN, export.digits_data
    except ImportError as e:
        print("export.py cannot be imported (%s): its DigitsCNN with a plain CSV reader" % e)
        tree = ast.parse(open(EXPORT_PY).read(), EXPORT_PY)
        cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "DigitsCNN")
        scope = {"torch": torch, "nn": torch.nn, "F": torch.nn.functional, "Tensor": torch.Tensor}
        exec(compile(ast.Module(body=[cls], type_ignores=[]), EXPORT_PY, "exec"), scope)
        model_class, data = scope["DigitsCNN"], lambda seed: plain_digits_data(csv, seed)
    torch.manual_seed(0)
    model = torch.jit.script(model_class())
    model.save(os.path.join(out, "digits_cnn.pt"))
    train, val = data(0)
    torch.save(train, os.path.join(out, "digits_train.pt"))
    torch.save(val, os.path.join(out, "digits_val.pt"))
    print("wrote %s: DigitsCNN (%d parameters), %d training and %d validation samples, torch %s"
          % (out, sum(p.numel() for p in model.parameters()), len(train["y"]), len(val["y"]), torch.__version__))


if __name__ == "__main__":
    main()
