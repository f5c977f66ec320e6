# SPDX-License-Identifier: Apache-2.0
"""A Python swarm peer: the digits MLP trained by a plain PyTorch loop with
loom.Optimizer over AdamW. With --alone, the same loop with the bare
optimizer on one process (the baseline). Writes a JSON result."""
import argparse
import json
import logging
import math
import sys
import time

import torch
from torch import nn

import loom
from digits_data import digits_split, make_model, accuracy


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-id", default="py-digits")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--peer", type=int, default=0, help="seeds this peer's sample order")
    ap.add_argument("--epochs", type=int, default=60)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--target", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--cosine", type=int, default=0, metavar="WARMUP",
                    help="the demo's schedule: WARMUP epochs of linear warm-up, then cosine to 0 at --epochs")
    ap.add_argument("--out", required=True)
    ap.add_argument("--alone", action="store_true", help="no swarm: the bare optimizer, batch = target")
    ap.add_argument("--option", action="append", default=[], help="NAME=VALUE, a collab option")
    ap.add_argument("--dump", help="a `loom train --dump-init` folder of digits: its split and initial weights")
    ap.add_argument("--optimizer", default="adamw", choices=["adamw", "rmsprop"])
    ap.add_argument("--load-at", type=int, default=-1, metavar="EPOCH",
                    help="at this epoch, ruin the parameters, then load_state_from_peers()")
    ap.add_argument("--deadline", type=float, default=400.0)
    ap.add_argument("--step-delay", type=float, default=0.0, metavar="SECONDS",
                    help="sleep after each step: a swarm slow enough for a restarted peer to find it running")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(1)

    x, y, tx, ty = digits_split(args.dump)
    model = make_model(seed=0, dump=args.dump)
    if args.optimizer == "adamw":
        inner = torch.optim.AdamW(model.parameters(), lr=args.lr)
    else:
        inner = torch.optim.RMSprop(model.parameters(), lr=args.lr / 3)
    scheduler = None
    if args.cosine:
        warm, span = args.cosine, max(1, args.epochs - args.cosine)

        def factor(epoch):  # as `loom train` computes it (core/src/train/schedule.cpp)
            if epoch < warm:
                return (epoch + 1) / warm
            return 0.5 * (1 + math.cos(math.pi * min(1.0, (epoch - warm) / span)))
        scheduler = torch.optim.lr_scheduler.LambdaLR(inner, factor)
    g = torch.Generator().manual_seed(1000 + args.peer)
    order, at = torch.randperm(len(y), generator=g), 0

    def batch(size):
        # Passes over the data in a fresh order each, as loom train's sampler.
        nonlocal order, at
        if at + size > len(order):
            order, at = torch.randperm(len(y), generator=g), 0
        at += size
        return order[at - size:at]
    losses, window = [], []
    start = time.monotonic()
    if args.alone:
        for _ in range(args.epochs):
            idx = batch(args.target)
            loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
            inner.zero_grad()
            loss.backward()
            inner.step()
            if scheduler is not None:
                scheduler.step()
            losses.append(loss.item())
        epoch = args.epochs
    else:
        options = dict(o.split("=", 1) for o in args.option)
        opt = loom.Optimizer(inner, model=model, batch_size_per_step=args.batch, run_id=args.run_id,
                             target_batch_size=args.target, listen="127.0.0.1", port=args.port, scheduler=scheduler,
                             max_steps=args.epochs, **options)
        print(f"joined at epoch {opt.local_epoch}", flush=True)
        while opt.local_epoch < args.epochs and not opt.should_stop:
            if time.monotonic() - start > args.deadline:
                print(f"deadline: epoch {opt.local_epoch} of {args.epochs}", file=sys.stderr)
                sys.exit(3)
            idx = batch(args.batch)
            loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            window.append(loss.item())
            before = opt.local_epoch
            opt.step(loss=loss)  # published: `loom swarm status` shows it
            opt.zero_grad()
            if args.step_delay > 0:
                time.sleep(args.step_delay)
            if opt.local_epoch == args.load_at and before != args.load_at:
                with torch.no_grad():
                    for p in model.parameters():
                        p.fill_(1000.0)
                loaded = opt.load_state_from_peers()
                biggest = max(p.abs().max().item() for p in model.parameters())
                print(f"load_state_from_peers: loaded={loaded} epoch={opt.local_epoch} max|w|={biggest:.4g}", flush=True)
            if opt.local_epoch != before:
                # The mean loss of this peer's micro-batches in the epoch.
                losses.append(sum(window) / len(window))
                window = []
                lr = inner.param_groups[0]["lr"]
                print(f"epoch {opt.local_epoch} loss {losses[-1]:.4f} lr {lr:.6g} peers {opt.num_peers}", flush=True)
        epoch = opt.local_epoch
        opt.shutdown()
    with torch.no_grad():
        val_loss = nn.functional.cross_entropy(model(tx), ty).item()
    result = {"accuracy": accuracy(model, tx, ty), "val_loss": val_loss, "epoch": epoch, "losses": losses,
              "seconds": time.monotonic() - start}
    torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, args.out + ".pt")
    with open(args.out, "w") as f:
        json.dump(result, f)
    print(json.dumps({k: v for k, v in result.items() if k != "losses"}), flush=True)


if __name__ == "__main__":
    main()
