# SPDX-License-Identifier: Apache-2.0
"""Equivalence: two Python peers with batch 128 and target_batch_size 256
follow the loss curve of a single-process PyTorch run with batch 256 (the
same model, initial weights and lr), within the C++ swarm tests' tolerance
(tests/swarm/equivalence_test.cpp): the mean training loss over each window
of 10 epochs, and the final validation loss, within 20% of the single run's."""
import unittest

import pyswarm

EPOCHS, WINDOW, TOLERANCE = 30, 10, 0.20


class Equivalence(pyswarm.ScratchTest):
    def test_two_peers_follow_the_loss_curve_of_one_process_with_the_doubled_batch(self):
        single = self.peer("single", ["--alone", "--epochs", str(EPOCHS), "--target", "256"])
        self.assertEqual(single.wait(120), 0, single.tail())
        rid, port = pyswarm.run_id("eq"), pyswarm.free_port()
        common = ["--run-id", rid, "--epochs", str(EPOCHS), "--batch", "128", "--target", "256",
                  "--option", "min_peers=2", "--option", "matchmaking_time=0.5"]
        a = self.peer("a", common + ["--port", str(port), "--peer", "0"])
        b = self.peer("b", common + ["--peer", "1"],
                    env={"LOOM_INITIAL_PEERS": f"127.0.0.1:{port}"})
        for p in (a, b):
            self.assertEqual(p.wait(180), 0, p.tail())
        ref = pyswarm.result(single)
        for p in (a, b):
            mine = pyswarm.result(p)
            self.assertEqual(len(mine["losses"]), EPOCHS, p.tail())
            worst = 0.0
            for first in range(0, EPOCHS, WINDOW):
                m = sum(mine["losses"][first:first + WINDOW])
                t = sum(ref["losses"][first:first + WINDOW])
                rel = abs(m - t) / t
                worst = max(worst, rel)
                self.assertLessEqual(rel, TOLERANCE, f"{p.name}: epochs {first}-{first + WINDOW - 1}: mean loss "
                                                     f"{m / WINDOW:.4f} vs one process's {t / WINDOW:.4f}")
            final = abs(mine["val_loss"] - ref["val_loss"]) / ref["val_loss"]
            print(f"[ figures ] {p.name}: worst 10-epoch window {worst:.1%} from one process; final validation loss "
                  f"{mine['val_loss']:.4f} vs {ref['val_loss']:.4f}", flush=True)
            self.assertLessEqual(final, TOLERANCE)


if __name__ == "__main__":
    unittest.main(verbosity=2)
