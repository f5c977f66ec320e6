# SPDX-License-Identifier: Apache-2.0
"""One rank of the loom.Communicator test (run under `loom launch -n 2`):
allreduce sums f32 and f64 exactly, broadcast copies root's, barrier meets."""
import sys

import torch

import loom

name = sys.argv[1] if len(sys.argv) > 1 else "ucx"
comm = loom.Communicator(name=name, timeout=60)
assert comm.size == 2, comm.size
for dtype in (torch.float32, torch.float64):
    # Integers below 2**24 are exact in f32, so the sum must be exact too.
    t = torch.arange(1000, dtype=dtype) * (comm.rank + 1)
    comm.allreduce(t)
    expected = torch.arange(1000, dtype=dtype) * 3
    assert torch.equal(t, expected), f"{dtype}: {t[:5]} != {expected[:5]}"
    m = torch.full((7,), float(comm.rank), dtype=dtype)
    comm.allreduce(m, op="max")
    assert torch.equal(m, torch.ones(7, dtype=dtype)), m
b = torch.full((5,), 42.0 if comm.rank == 1 else -1.0, dtype=torch.float64)
comm.broadcast(b, root=1)
assert torch.equal(b, torch.full((5,), 42.0, dtype=torch.float64)), b
comm.barrier()
print(f"rank {comm.rank} of {comm.size}: allreduce f32 and f64 exact, broadcast and barrier ok", flush=True)
