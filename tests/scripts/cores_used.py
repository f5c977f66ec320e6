#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""How many cores each test uses on average, run alone: CPU time (user and
system, every process it started included) over wall time.

The suite runs a timed multi-process test beside another only when it used
at most one core this way (tests/swarm/CMakeLists.txt, tests/netns/); the
rest run alone. Measure a new test before listing it there.

usage: tests/scripts/cores_used.py BUILD_DIR TEST_NAME...   (exact ctest names)
"""
import re
import resource
import subprocess
import sys
import time


def measure(build, name):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    rc = subprocess.run(["ctest", "--test-dir", build, "--no-tests=error", "-R", "^" + re.escape(name) + "$"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return rc, wall, cpu


def main():
    if len(sys.argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    build, names = sys.argv[1], sys.argv[2:]
    failed = 0
    print(f"{'test':70} {'wall s':>7} {'cpu s':>7} {'cores':>6}")
    for name in names:
        rc, wall, cpu = measure(build, name)
        failed += rc != 0
        if rc == 8:  # ctest --no-tests=error
            print(f"{name:70} no test of this name in {build} (ctest -N lists them)")
            continue
        print(f"{name:70} {wall:7.1f} {cpu:7.1f} {cpu / wall:6.2f}{'' if rc == 0 else '  FAILED (exit %d)' % rc}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
