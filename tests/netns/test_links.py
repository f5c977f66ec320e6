# SPDX-License-Identifier: Apache-2.0
"""Bandwidth-aware parts (balance_bandwidth) over emulated links: four charlm
peers on four hosts (netns_hosts.py), one host's link limited by tbf to a
quarter of the others' (25 against 100 Mbit/s, both ways), run twice by
bench/swarm_links.py: with the ring allreduce (equal parts) and with parts
sized by measured link rate. The rounds by parts must take at most 0.9 of
the ring's (one run measured 0.80), and in the slow host's last round its
link must show the lowest rate and own at most half an equal part.

No partition can bring such a group near an all-fast one: the slow member
must send and receive its own vector V at least once (V / (B/4) = 4 V / B)
where an all-fast ring moves 1.5 V at B, so 2.67x is the floor; the ring
with the slow member takes 6 V / B.

KilledInsideTheBlocksTest: a member SIGKILLed in the middle of such a
round's blocks; the others name what stopped and go on. Run as root by
Debian's python3 (test_links.py [CLASS...]); exit 77 (skipped) without root
or the tools."""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import shutil
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import netns_hosts  # noqa: E402
from test_hosts import _Peers, text  # noqa: E402

MODEL = ["task.d_model=192", "task.layers=4", "task.heads=4", "task.ffn=768"]  # 1.9 M parameters, 7.6 MB


class BalancedPartsTest(unittest.TestCase):
    def setUp(self):
        reason = netns_hosts.skip_reason()
        if reason:
            self.skipTest(reason)
        self.loom = os.environ.get("LOOM_BIN", "")
        if not os.access(self.loom, os.X_OK):
            self.skipTest(f"LOOM_BIN={self.loom!r} is not an executable (ctest sets it to the built loom)")
        self.out = tempfile.mkdtemp(prefix="loom-netns-parts-")

    def tearDown(self):
        if os.environ.get("KEEP_LOGS"):
            print(f"\n  logs kept in {self.out}", file=sys.stderr)
        else:
            shutil.rmtree(self.out, ignore_errors=True)

    def test_parts_by_link_rate_beat_the_ring_when_one_link_is_slow(self):
        argv = [sys.executable, os.path.join(ROOT, "bench", "swarm_links.py"), "--slow-mbit", "25", "--epochs", "8",
                "--timeout", "240", "--loom", self.loom, "--out", self.out,
                "--variant", "ring:strategy.options.balance_bandwidth=false",
                "--variant", "parts:strategy.options.balance_bandwidth=true"]
        for s in MODEL:
            argv += ["--set", s]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stdout[-4000:] + r.stderr[-4000:])
        with open(os.path.join(self.out, "results.json")) as f:
            ring, parts = json.load(f)
        ratio = parts["round_ms"] / ring["round_ms"]
        sent = parts["sent_mb_per_host"]
        print(f"\n  one link of four at 25 Mbit/s: rounds {ring['round_ms']:.0f} ms by the ring, "
              f"{parts['round_ms']:.0f} ms by parts (x{ratio:.2f}; 0.67 in theory); MB sent per host by parts "
              + ", ".join(f"{x:.0f}" for x in sent), file=sys.stderr)
        self.assertLessEqual(ratio, 0.9, r.stdout)
        # The slow host's last round: its own rate the lowest, its part small.
        with open(os.path.join(self.out, "parts", f"peer{len(sent) - 1}.log")) as f:
            lines = [l for l in f if "parts by link rate: " in l]
        self.assertTrue(lines, "the slow host never averaged by parts")
        last = lines[-1]
        parts = [(float(p), float(c)) for p, c in re.findall(r"([0-9.]+) \(([0-9.]+) MB/s\)", last)]
        rank = int(re.search(r"this peer is rank (\d+)", last).group(1))
        print(f"  the slow host's last round: {last.strip()}", file=sys.stderr)
        self.assertEqual(len(parts), len(sent), last)
        self.assertEqual(min(c for _, c in parts), parts[rank][1], "the slow link should show the lowest rate")
        self.assertLessEqual(parts[rank][0], 0.5 / len(sent), "the slow link should own at most half an equal part")


class KilledInsideTheBlocksTest(_Peers):
    """A member SIGKILLed while its group averages by parts: four charlm peers
    on four hosts, one link at 25 Mbit/s, so that a round's blocks take
    seconds of each epoch. A fast member is killed once it has averaged by
    parts; where the kill missed the blocks (it fell in matchmaking or
    compute), it is started again, loads the state and is killed again. The
    survivors must name the blocks that stopped, go on by themselves within
    the round's deadline, and finish every epoch. One run: the kill fell in
    epoch 3's blocks (49 of 100, 45 of 96 and 9 of 60 moved), UCX reported
    the endpoint's timeout and the three averaged alone 7.6 s after."""

    epochs = 20  # the kill comes at about epoch 3; room for three more tries
    timeout_s = 20  # averaging_timeout: a survivor waiting it out would show

    def charlm_peer(self, host, join, name=None):
        sets = {"task.d_model": 192, "task.layers": 4, "task.heads": 4, "task.ffn": 768, "trainer.batch_size": 8,
                "trainer.log_every": 1000, "trainer.val_every": 0, "trainer.checkpoint_every": 0,
                "trainer.warmup_steps": 2, "trainer.threads": 1, "strategy.name": "collab"}
        return self.peer(host, join, min_peers=3, name=name, config=os.path.join(ROOT, "examples", "configs",
                                                                                 "charlm.toml"),
                         sets=sets, target_batch_size=64, balance_bandwidth="true", matchmaking_time=3,
                         averaging_timeout=self.timeout_s, average_state_every=0, bootstrap_timeout=120)

    def test_a_member_killed_inside_the_blocks_leaves_the_others_averaging(self):
        stopped = re.compile(r"failed: the mean by parts stopped with (\d+) of (\d+) blocks moved")
        with netns_hosts.Hosts(prefix="loomkill", shm_size="256m") as hosts:
            hs = [hosts.add_host(f"k{i}", rate_mbit=25 if i == 3 else 100) for i in range(4)]
            began = time.monotonic()
            join = f"{hs[0].address}:7000"
            first = self.charlm_peer(hs[0], "")
            while f"listening on {hs[0].address}:7000" not in text(first[1]):
                self.assertIsNone(first[0].poll(), text(first[1]))
                self.assertLess(time.monotonic() - began, 30, "the first peer never listened")
                time.sleep(0.1)
            survivors = [first, self.charlm_peer(hs[1], join), self.charlm_peer(hs[3], join)]
            victim = self.charlm_peer(hs[2], join)
            inside = None
            # A kill 1.5 s after a round by parts falls in the next round's
            # blocks when that round goes by parts too; a ring round (parts
            # predicted no faster) takes it instead: up to 4 tries (2 missed
            # in 2 of the last 3 full suites, when a busy neighbour test
            # slowed the epochs).
            for attempt in range(4):
                log = victim[1]
                limit = time.monotonic() + 120
                while text(log).count("parts by link rate: ") < 2:
                    self.assertIsNone(victim[0].poll(), text(log)[-3000:])
                    self.assertLess(time.monotonic(), limit, "the victim never averaged by parts:\n" + text(log)[-3000:])
                    time.sleep(0.1)
                # 1.5 s after a round by parts ended: the next epoch's
                # compute and matchmaking take well under that, and its
                # blocks about 3 s of each 4 to 5 s epoch here.
                seen = text(log).count("parts by link rate: ")
                while text(log).count("parts by link rate: ") == seen and victim[0].poll() is None:
                    time.sleep(0.02)
                time.sleep(1.5)
                hs[2].signal(victim[0], signal.SIGKILL)
                victim[0].wait(timeout=10)
                killed_at = time.monotonic()
                # The survivors' verdict on the round the kill fell in, and
                # their first round of three after it.
                threes = len(re.findall(r"averaged gradients of \d+ samples with 3 peers", text(first[1])))
                limit = killed_at + self.timeout_s + 40
                went_on = None
                while time.monotonic() < limit and went_on is None:
                    if len(re.findall(r"averaged gradients of \d+ samples with 3 peers", text(first[1]))) > threes:
                        went_on = time.monotonic() - killed_at
                    time.sleep(0.2)
                verdicts = [m for _, path in survivors for m in stopped.findall(text(path))]
                self.assertIsNotNone(went_on, "the survivors never averaged by themselves after the kill:\n"
                                     + text(first[1])[-3000:])
                if any(0 < int(a) < int(b) for a, b in verdicts):
                    inside = (went_on, verdicts)
                    break
                # Missed the blocks: the victim comes back (it loads the
                # state as a joiner) and is killed again.
                victim = self.charlm_peer(hs[2], join, name=f"k2-again{attempt}")
            if inside is None:
                victim[0].kill()
            codes = self.wait_all(survivors, began, 400)
        logs = [text(path) for _, path in survivors]
        for code, log in zip(codes, logs):
            tail = "\n".join(log.splitlines()[-30:])
            self.assertEqual(code, 0, tail)
            self.assertRegex(log, rf"final bpc: [0-9.]+ after {self.epochs} steps", tail)
        self.assertIsNotNone(inside, "no kill of 2 fell inside the blocks:\n" + "\n".join(
            l for log in logs for l in log.splitlines() if "failed:" in l))
        went_on, verdicts = inside
        print(f"\n  killed inside the blocks: the survivors' verdicts {verdicts} (blocks moved of those expected); "
              f"they averaged by themselves {went_on:.1f} s after the kill", file=sys.stderr)
        # Detected by the transport or at the round's deadline, never later.
        self.assertLess(went_on, self.timeout_s + 15)


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    if not result.wasSuccessful():
        sys.exit(1)
    sys.exit(77 if result.testsRun <= len(result.skipped) else 0)
