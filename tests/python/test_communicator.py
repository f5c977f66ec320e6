# SPDX-License-Identifier: Apache-2.0
"""loom.Communicator on 2 ranks under `loom launch`: exact sums for f32 and
f64 over the ucx collective."""
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
LOOM = os.environ.get("LOOM_BIN", "loom")


class CommunicatorUnderLaunch(unittest.TestCase):
    def test_allreduce_on_two_ranks_is_exact(self):
        run = subprocess.run([LOOM, "launch", "-n", "2", "--", sys.executable, os.path.join(HERE, "communicator_rank.py"),
                              "ucx"], capture_output=True, text=True, timeout=180)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr[-4000:])
        for rank in (0, 1):
            self.assertIn(f"rank {rank} of 2: allreduce f32 and f64 exact", run.stdout + run.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
