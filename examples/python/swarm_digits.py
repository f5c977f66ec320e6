#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A PyTorch training loop that trains with a Loom swarm.

The first peer (from the repository root, after building):
    PYTHONPATH=build/python /usr/bin/python3 examples/python/swarm_digits.py
It logs the address others join through; every other peer, on this machine
or another:
    LOOM_INITIAL_PEERS=ADDRESS PYTHONPATH=build/python /usr/bin/python3 examples/python/swarm_digits.py
(With the python3-loom package installed, leave out PYTHONPATH.) Peers may
come and go; a new one downloads the swarm's state and trains on.
"""
import argparse
import logging

import torch
from sklearn.datasets import load_digits
from torch import nn

import loom


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run-id", default="py-digits-demo", help="peers with the same run_id train together")
    ap.add_argument("--epochs", type=int, default=100, help="swarm epochs (optimizer steps) to train")
    ap.add_argument("--listen", default="127.0.0.1", help="0.0.0.0 to let other machines join")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target)
    test = torch.arange(len(y)) % 5 == 0
    torch.manual_seed(0)  # every peer starts from the same weights
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))

    inner = torch.optim.AdamW(model.parameters(), lr=3e-3)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(inner, T_max=args.epochs)  # steps per swarm epoch
    opt = loom.Optimizer(inner, model=model, scheduler=scheduler, run_id=args.run_id, target_batch_size=256,
                         batch_size_per_step=32, listen=args.listen, max_steps=args.epochs)
    train_x, train_y = x[~test], y[~test]
    while opt.local_epoch < args.epochs:
        idx = torch.randint(0, len(train_y), (32,))
        loss = nn.functional.cross_entropy(model(train_x[idx]), train_y[idx])
        loss.backward()
        opt.step()          # accumulates; averages with the swarm and steps at target_batch_size
        opt.zero_grad()
    opt.shutdown()
    with torch.no_grad():
        accuracy = (model(x[test]).argmax(1) == y[test]).float().mean().item()
    print(f"epoch {opt.local_epoch}: test accuracy {accuracy:.4f}")


if __name__ == "__main__":
    main()
