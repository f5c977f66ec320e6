#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Summary of compare_collectives.sh: allreduce time and busbw per size for
ucx, mpi and gloo (each its best round), the spread over rounds at the
largest size, then the issue's targets as ratios measured in this one run.

   compare_collectives_table.py OUT_DIR TAG_BW_MIB_S TAG_LAT_US TLS MAX_BYTES
"""
import glob
import json
import os
import sys

NAMES = ("ucx", "ucx-nocma", "mpi", "gloo")


def rounds_of(out, name):
    runs = []
    for path in sorted(glob.glob(os.path.join(out, name + ".*.json"))):
        with open(path) as f:
            runs.append({r["bytes"]: r for r in json.load(f)["results"]})
    return runs


def best(runs):
    merged = {}
    for run in runs:
        for size, r in run.items():
            if size not in merged or r["time_us"] < merged[size]["time_us"]:
                merged[size] = r
    return merged


def main():
    out, bw_mib, lat_us, tls, big = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4], int(sys.argv[5])
    rounds = {n: rounds_of(out, n) for n in NAMES}
    names = [n for n in NAMES if rounds[n]]  # ucx-nocma: only from runs that made it
    runs = {n: best(rounds[n]) for n in NAMES}
    p2p_gbps = bw_mib * 1048576 / 1e9  # ucx_perftest's MB/s are 2^20 bytes per second
    print("# allreduce, f32 sum, 2 ranks: best time (us) over %d round(s) and its busbw (GB/s)"
          % max(len(r) for r in rounds.values()))
    print("%-10s" % "bytes" + "".join("%14s %10s" % (n + " us", "busbw") for n in names))
    for size in sorted(runs["ucx"]):
        row = "%-10d" % size
        for n in names:
            r = runs[n].get(size)
            row += "%14s %10s" % (("%.2f" % r["time_us"], "%.3f" % r["busbw_gbps"]) if r else ("-", "-"))
        print(row)
    print()
    for n in names:
        values = ["%.3f" % run[big]["busbw_gbps"] for run in rounds[n] if big in run]
        if values:
            print("# %s busbw at %d B, every round: %s GB/s" % (n, big, ", ".join(values)))
    print("# point to point (ucx_perftest, UCX_TLS=%s, best round): tag_bw %d B %.3f GB/s, tag_lat 8 B %.2f us"
          % (tls, big, p2p_gbps, lat_us))
    print()

    def get(name, size, field):
        r = runs[name].get(size)
        return r[field] if r else None

    checks = [
        ("busbw at %d B: ucx / mpi" % big, get("ucx", big, "busbw_gbps"), get("mpi", big, "busbw_gbps"), ">=", 2.0),
        ("busbw at %d B: ucx / gloo" % big, get("ucx", big, "busbw_gbps"), get("gloo", big, "busbw_gbps"), ">=", 3.0),
        ("busbw at %d B: ucx / point to point" % big, get("ucx", big, "busbw_gbps"), p2p_gbps, ">=", 0.5),
        ("latency at 8 B: ucx / mpi", get("ucx", 8, "time_us"), get("mpi", 8, "time_us"), "<=", 2.0),
        ("busbw at %d B: ucx / ucx-nocma (gain)" % big, get("ucx", big, "busbw_gbps"),
         get("ucx-nocma", big, "busbw_gbps"), ">=", 1.0),
    ]
    print("# targets (issue 4), measured in this run")
    for label, num, den, sign, target in checks:
        if num is None or not den:
            print("%-45s %8s   target %s %.1f   n/a" % (label, "n/a", sign, target))
            continue
        value = num / den
        ok = value >= target if sign == ">=" else value <= target
        print("%-45s %8.2f   target %s %.1f   %s" % (label, value, sign, target, "met" if ok else "MISSED"))


if __name__ == "__main__":
    main()
