#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What delay_averaging costs the model (issue 17), on loopback.

Runs PAIRS pairs of three-peer digits swarms with the settings of
tests/swarm/delay_averaging_test.cpp (200 epochs, half the data held out):
in each pair a synchronous swarm first, then one with delay_averaging =
true. Prints each swarm's final accuracy (the peers end equal), the samples
its rounds averaged, and the delayed swarm's difference from the
synchronous one of its pair; then the mean and the worst difference.

    bench/delay_averaging_quality.py [--build DIR] [--pairs N] [--keep]

--keep leaves the peers' logs (the folder is printed). About 15 s a pair.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS = 3
EPOCHS = 200


def swarm(loom, folder, delay, run_id):
    """One swarm of PEERS digits peers; (accuracy, mean samples a round), or
    None with the reason printed when a peer failed."""
    os.makedirs(folder)
    config = os.path.join(HERE, "examples/configs/digits-collab.toml")
    sets = ["trainer.threads=1", "task.test_fraction=0.5", f"trainer.max_steps={EPOCHS}",
            "strategy.options.listen=127.0.0.1", "strategy.options.verbose=true",
            f"strategy.options.min_peers={PEERS}", f"strategy.options.delay_averaging={'true' if delay else 'false'}",
            f"strategy.options.run_id={run_id}"]

    def start(i, env):
        args = [loom, "train", config]
        for s in sets + [f"trainer.output_dir={folder}/p{i}"]:
            args += ["--set", s]
        log = open(f"{folder}/p{i}.log", "w")
        return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, **env))

    procs = [start(0, {})]
    address, deadline = None, time.time() + 30
    while not address and time.time() < deadline and procs[0].poll() is None:
        time.sleep(0.05)
        m = re.search(r"listening on (\S+) ", open(f"{folder}/p0.log").read())
        address = m and m.group(1)
    if not address:
        procs[0].kill()
        print(f"  the first peer never listened: see {folder}/p0.log", file=sys.stderr)
        return None
    procs += [start(i, {"LOOM_INITIAL_PEERS": address}) for i in range(1, PEERS)]
    accuracy, samples = [], []
    for i, p in enumerate(procs):
        try:
            code = p.wait(300)
        except subprocess.TimeoutExpired:
            p.kill()
            code = -9
        log = open(f"{folder}/p{i}.log").read()
        m = re.search(r"final accuracy: ([0-9.]+)", log)
        if code != 0 or not m:
            print(f"  peer {i} exited {code}: see {folder}/p{i}.log", file=sys.stderr)
            return None
        accuracy.append(float(m.group(1)))
        samples += [int(s) for s in re.findall(r"averaged gradients of (\d+) samples", log)]
    return sum(accuracy) / PEERS, sum(samples) / max(1, len(samples))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(HERE, "build"))
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    if a.pairs < 1:
        ap.error(f"--pairs must be at least 1, not {a.pairs}")
    loom = os.path.join(a.build, "bin/loom")
    if not os.access(loom, os.X_OK):
        ap.error(f"no loom at {loom}: build first, or give --build")
    root = tempfile.mkdtemp(prefix="loom-delay-quality-")
    diffs, failed = [], False
    print(f"{PEERS} digits peers, {EPOCHS} epochs; accuracy (mean samples a round)")
    for pair in range(a.pairs):
        out = {}
        for delay in (False, True):
            name = "delayed" if delay else "synchronous"
            out[delay] = swarm(loom, f"{root}/{pair}-{name}", delay, f"delay-quality-{os.getpid()}-{pair}-{name}")
        if not out[False] or not out[True]:
            failed = True
            continue
        diff = out[True][0] - out[False][0]
        diffs.append(diff)
        print(f"pair {pair}: synchronous {out[False][0]:.4f} ({out[False][1]:.0f}), delayed {out[True][0]:.4f} "
              f"({out[True][1]:.0f}): {100 * diff:+.2f} points")
    if diffs:
        print(f"delayed against synchronous: {100 * sum(diffs) / len(diffs):+.2f} points on average, "
              f"worst {100 * min(diffs):+.2f}, over {len(diffs)} pairs")
    if a.keep or failed:
        print(f"logs: {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
