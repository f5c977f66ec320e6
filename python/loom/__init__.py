# SPDX-License-Identifier: Apache-2.0
"""Loom from Python: a swarm optimizer for any PyTorch training loop.

    import torch, loom
    opt = loom.Optimizer(torch.optim.AdamW(model.parameters(), lr=1e-3), model=model,
                         run_id="my-run", target_batch_size=4096, batch_size_per_step=32,
                         initial_peers=["203.0.113.5:31337"])
    for x, y in data:
        loss_fn(model(x), y).backward()
        opt.step()       # accumulates; averages with the swarm at target_batch_size
        opt.zero_grad()

The swarm is Loom's own `collab` strategy plugin (libcollab_strategy.so), the
one `loom train` peers run: Python peers and `loom train` peers with the same
model and run_id train together.
"""
import json as _json

import torch  # noqa: F401  (loads LibTorch before the extension that links it)

from . import _native
from .communicator import Communicator
from .optimizer import Optimizer

__all__ = ["Communicator", "Optimizer", "plugins"]


def plugins(plugin_path=None):
    """The plugins Loom finds, as `loom plugins --json` lists them: a dict with
    "search_path", "warnings" and "plugins" (name, kind, state, options...)."""
    return _json.loads(_native.plugins_json(list(plugin_path or [])))
