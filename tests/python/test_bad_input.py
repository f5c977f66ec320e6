# SPDX-License-Identifier: Apache-2.0
"""Bad input to the Python package raises an exception that names what is
wrong and what would be valid; none crashes the interpreter. Each case runs
in a child interpreter, so a crash would show as a signal, not a pass."""
import subprocess
import sys
import unittest

PRELUDE = """
import torch, loom
from torch import nn
model = nn.Linear(4, 2)
def adamw(m=model):
    return torch.optim.AdamW(m.parameters(), lr=1e-3)
def expect(exc, words, make):
    try:
        make()
    except exc as e:
        text = str(e)
        missing = [w for w in words if w not in text]
        if missing:
            raise SystemExit(f"message lacks {missing}: {text}")
        print("raised:", type(e).__name__, text)
        raise SystemExit(0)
    raise SystemExit("no exception")
"""

CASES = {
    "bad_option_value": ("ValueError", ["loom.Optimizer(target_batch_size=...)", "integer"],
                         "loom.Optimizer(adamw(), batch_size_per_step=8, target_batch_size='many', listen='127.0.0.1')"),
    "unknown_option": ("ValueError", ["no_such_option"],
                       "loom.Optimizer(adamw(), batch_size_per_step=8, no_such_option=1, listen='127.0.0.1')"),
    "unknown_plugin": ("ValueError", ["nosuch", "collab"],
                       "loom.Optimizer(adamw(), batch_size_per_step=8, strategy='nosuch')"),
    "bad_batch": ("ValueError", ["batch_size_per_step", "at least 1"],
                  "loom.Optimizer(adamw(), batch_size_per_step=0)"),
    "integer_parameters": ("ValueError", ["Long", "valid dtypes"],
                           "loom.Optimizer(torch.optim.SGD([torch.zeros(3, dtype=torch.long)], lr=0.1), "
                           "batch_size_per_step=8)"),
    "float64_parameters_for_collab": ("ValueError", ["float32", "collab"],
                                      "m = nn.Linear(4, 2).double(); "
                                      "loom.Optimizer(adamw(m), batch_size_per_step=8, listen='127.0.0.1', "
                                      "target_batch_size=64)"),
    "meta_device": ("ValueError", ["meta", "valid device: cpu"],
                    "m = nn.Linear(4, 2, device='meta'); "
                    "loom.Optimizer(adamw(m), batch_size_per_step=8, listen='127.0.0.1')"),
    "option_of_bad_type": ("ValueError", ["swarm_key", "valid"],
                           "loom.Optimizer(adamw(), batch_size_per_step=8, swarm_key=object())"),
    "load_state_with_single": ("ValueError", ["single", "load_state"],
                               "o = loom.Optimizer(adamw(), batch_size_per_step=8, strategy='single'); "
                               "o.load_state_from_peers()"),
    "loss_not_a_number": ("ValueError", ["loss", "number or a one-element tensor"],
                          "o = loom.Optimizer(adamw(), batch_size_per_step=8, strategy='single'); o.step(loss='low')"),
    "loss_of_many_elements": ("ValueError", ["3 elements", "scalar loss"],
                              "o = loom.Optimizer(adamw(), batch_size_per_step=8, strategy='single'); "
                              "o.step(loss=torch.ones(3))"),
    "communicator_unknown_plugin": ("ValueError", ["nosuch"], "loom.Communicator(name='nosuch')"),
    "communicator_bad_op": ("ValueError", ["op", "sum"],
                            "c = loom.Communicator(name='ucx'); c.allreduce(torch.ones(3), op='median')"),
    "communicator_bad_dtype": ("ValueError", ["Bool", "float32"],
                               "c = loom.Communicator(name='ucx'); c.allreduce(torch.ones(3, dtype=torch.bool))"),
}


class BadInput(unittest.TestCase):
    pass


def make_case(name, exc, words, code):
    def test(self):
        script = PRELUDE + f"expect({exc}, {words!r}, lambda: exec({code!r}, globals()))\n"
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        self.assertEqual(run.returncode, 0, f"{name}: exit {run.returncode}\n{run.stdout}\n{run.stderr[-3000:]}")
        print(f"{name}: {run.stdout.strip()}")
    return test


for case, (exc, words, code) in CASES.items():
    setattr(BadInput, f"test_{case}", make_case(case, exc, words, code))


if __name__ == "__main__":
    unittest.main(verbosity=2)
