# SPDX-License-Identifier: Apache-2.0
"""One swarm, two front ends: 2 Python peers (loom.Optimizer) and 1 `loom
train` peer (the torchscript task) train the same model with the same
run_id together, and all three end with equal parameters after the last
state averaging."""
import json
import os
import unittest

import numpy as np
import torch

import pyswarm
from digits_data import digits_split, make_model

EPOCHS = 40
LOOM = os.environ.get("LOOM_BIN", "loom")



def read_dump(folder):
    with open(os.path.join(folder, "manifest.json")) as f:
        manifest = json.load(f)
    out = {}
    for p in manifest["params"]:
        data = np.fromfile(os.path.join(folder, p["file"]), dtype=np.float32).reshape(p["shape"])
        out[p["name"]] = torch.from_numpy(data)
    return out


class MixedSwarm(pyswarm.ScratchTest):
    def test_python_and_loom_train_peers_train_one_model_to_equal_parameters(self):
        x, y, tx, ty = digits_split()
        torch.jit.script(make_model(seed=0)).save(os.path.join(self.scratch, "mlp.pt"))
        torch.save({"x": x, "y": y}, os.path.join(self.scratch, "train.pt"))
        torch.save({"x": tx, "y": ty}, os.path.join(self.scratch, "val.pt"))
        rid, port = pyswarm.run_id("mixed"), pyswarm.free_port()
        config = os.path.join(self.scratch, "cxx.toml")
        pyswarm.torchscript_collab_config(config, scratch=self.scratch, out=f"{self.scratch}/cxx-out", run_id=rid,
                                          epochs=EPOCHS, validation=True, port=port, min_peers=3,
                                          matchmaking_time=0.5, averaging_timeout=10.0)
        dump = os.path.join(self.scratch, "cxx-final")
        cxx = self.process("cxx", [LOOM, "train", config, "--dump-final", dump])
        env = {"LOOM_INITIAL_PEERS": f"127.0.0.1:{port}"}
        common = ["--run-id", rid, "--epochs", str(EPOCHS), "--option", "min_peers=3",
                  "--option", "matchmaking_time=0.5", "--option", "averaging_timeout=10", "--option", "verbose=true"]
        py = [self.peer(f"py{i}", common + ["--peer", str(i)], env=env) for i in (1, 2)]
        self.assertEqual(cxx.wait(240), 0, cxx.tail())
        for p in py:
            self.assertEqual(p.wait(120), 0, p.tail())
        # They trained together: rounds of all three, not just a last averaging.
        self.assertRegex(cxx.log(), r"averaged gradients of \d+ samples with 3 peers", cxx.tail())
        for p in py:
            self.assertRegex(p.log(), r"averaged gradients of \d+ samples with 3 peers", p.tail())
        # Both front ends time their rounds alike (bench/python_round_time.py
        # compares them): the parts add up, and the last epoch's round
        # averaged the parameters.
        for p in [cxx] + py:
            rounds = pyswarm.round_lines(p.log())
            self.assertTrue(rounds, p.tail())
            for epoch, total, grads, step, params, _ in rounds:
                self.assertAlmostEqual(total, grads + step + params, delta=0.3, msg=f"{p.name}, epoch {epoch}")
            self.assertTrue(rounds[-1][5], f"{p.name}: the last round did not average the parameters\n{p.tail()}")
        cxx_params = read_dump(dump)
        py_params = [torch.load(p.out + ".pt") for p in py]
        self.assertEqual(sorted(cxx_params), sorted(py_params[0]))
        worst = 0.0
        for name, value in cxx_params.items():
            for other in py_params:
                worst = max(worst, (value - other[name]).abs().max().item())
        print(f"[ figures ] largest parameter difference between the loom train peer and the Python peers: {worst:.3g}; "
              f"accuracy {[pyswarm.result(p)['accuracy'] for p in py]}", flush=True)
        self.assertLessEqual(worst, 1e-5)
        for p in py:
            self.assertGreater(pyswarm.result(p)["accuracy"], 0.9, p.tail())


if __name__ == "__main__":
    unittest.main(verbosity=2)
