#!/usr/bin/env python3
"""Summary of compare_collectives.sh: one table of allreduce time and busbw
per size for ucx, mpi and gloo, then the issue's targets as ratios measured
in this one run.

   compare_collectives_table.py OUT_DIR TAG_BW_MIB_S TAG_LAT_US TLS MAX_BYTES
"""
import json
import os
import sys


def load(out, name):
    path = os.path.join(out, name + ".json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return {r["bytes"]: r for r in json.load(f)["results"]}


def main():
    out, bw_mib, lat_us, tls, max_bytes = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4], int(sys.argv[5])
    runs = {name: load(out, name) for name in ("ucx", "mpi", "gloo")}
    p2p_gbps = bw_mib * 1048576 / 1e9  # ucx_perftest's MB/s are 2^20 bytes per second
    print("# allreduce, f32 sum, 2 ranks: time (us) and busbw (GB/s) per size")
    head = "%-10s" % "bytes" + "".join("%14s %10s" % (n + " us", "busbw") for n in runs)
    print(head)
    for size in sorted(runs["ucx"]):
        row = "%-10d" % size
        for name, run in runs.items():
            r = run.get(size)
            row += "%14s %10s" % (("%.2f" % r["time_us"], "%.3f" % r["busbw_gbps"]) if r else ("-", "-"))
        print(row)
    print()
    print("# point to point (ucx_perftest, UCX_TLS=%s): tag_bw %d B %.3f GB/s, tag_lat 8 B %.2f us"
          % (tls, max_bytes, p2p_gbps, lat_us))
    print()
    big, small = max_bytes, 8
    checks = []

    def ratio(label, num, den, target, higher_is_better=True):
        if num is None or den is None or den == 0:
            checks.append((label, None, target, None))
            return
        value = num / den
        ok = value >= target if higher_is_better else value <= target
        checks.append((label, value, target, ok))

    def get(name, size, field):
        r = runs.get(name, {}).get(size)
        return r[field] if r else None

    ratio("busbw at %d B: ucx / mpi" % big, get("ucx", big, "busbw_gbps"), get("mpi", big, "busbw_gbps"), 2.0)
    ratio("busbw at %d B: ucx / gloo" % big, get("ucx", big, "busbw_gbps"), get("gloo", big, "busbw_gbps"), 3.0)
    ratio("busbw at %d B: ucx / point to point" % big, get("ucx", big, "busbw_gbps"), p2p_gbps, 0.5)
    ratio("latency at 8 B: ucx / mpi", get("ucx", small, "time_us"), get("mpi", small, "time_us"), 2.0, False)
    print("# targets (issue 4), measured in this run")
    for label, value, target, ok in checks:
        sign = ">=" if "latency" not in label else "<="
        shown = "n/a" if value is None else "%.2f" % value
        verdict = "n/a" if ok is None else ("met" if ok else "MISSED")
        print("%-45s %8s   target %s %.1f   %s" % (label, shown, sign, target, verdict))


if __name__ == "__main__":
    main()
