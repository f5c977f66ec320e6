# SPDX-License-Identifier: Apache-2.0
"""loom.Communicator on 2 ranks: exact sums for f32 and f64, broadcast and
barrier, over the ucx collective under `loom launch` and over the mpi
collective under mpirun."""
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
LOOM = os.environ.get("LOOM_BIN", "loom")
MPIRUN = os.environ.get("LOOM_MPIRUN", "")


class CommunicatorUnderLaunch(unittest.TestCase):
    def test_allreduce_on_two_ranks_is_exact(self):
        run = subprocess.run([LOOM, "launch", "-n", "2", "--", sys.executable, os.path.join(HERE, "communicator_rank.py"),
                              "ucx"], capture_output=True, text=True, timeout=180)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr[-4000:])
        for rank in (0, 1):
            self.assertIn(f"rank {rank} of 2: allreduce f32 and f64 exact", run.stdout + run.stderr)

    @unittest.skipUnless(MPIRUN, "built without the mpi collective (no LOOM_MPIRUN)")
    def test_allreduce_under_mpirun_over_the_mpi_collective_is_exact(self):
        argv = [MPIRUN, "-np", "2", "--oversubscribe"]
        if os.geteuid() == 0:
            argv.append("--allow-run-as-root")
        argv += [sys.executable, os.path.join(HERE, "communicator_rank.py"), "mpi"]
        env = dict(os.environ, OMPI_MCA_rmaps_base_oversubscribe="1")
        run = subprocess.run(argv, capture_output=True, text=True, timeout=180, env=env)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr[-4000:])
        for rank in (0, 1):
            self.assertIn(f"rank {rank} of 2: allreduce f32 and f64 exact", run.stdout + run.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
