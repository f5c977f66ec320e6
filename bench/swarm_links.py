#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Swarm over slow links (issue 17's benchmark): charlm at about 10.9 M
parameters, N peers (default 4), one per emulated host
(tests/netns/netns_hosts.py) whose link tbf limits to --rate-mbit (default
100) both ways. Each variant (a set of options, default: each codec for
gradients and state averaging) runs a fresh swarm for --epochs epochs; per variant
one row:

  samples/s   the swarm's averaged samples per second, from the first peer's
              first averaged epoch to its last (target x epochs / time)
  MB/sample   bytes every host sent on its link (tx of eth0, read from the
              switch side before the first peer starts and after the last
              exits: DHT, state and the collective together) per averaged
              sample of the swarm
  round ms    the median time a round's averaging took on the training thread
              ("allreduce N ms" or "sliced mean in C N ms" in the peers' logs;
              under delay_averaging, "training waited N ms" for the round)
  bits/char   the peers' mean final validation bits per character, at equal
              samples when every variant runs as many epochs of the same
              target (a local_updates variant sets its own trainer.max_steps,
              in local steps: give the others as many samples with --epochs)

and each against the first variant of the run. There is no netem on this
kernel: the links have bandwidth but no latency or loss. The CPUs are shared
by every peer: on a small machine compute bounds what the link does not.

Run as root with Debian's python3:
  /usr/bin/python3 bench/swarm_links.py [--peers 4] [--rate-mbit 100] [--slow-mbit R] [--epochs 8]
      [--variant NAME:KEY=VALUE,KEY=VALUE ...] [--set KEY=VALUE ...]
Exit 1 when a peer fails (its log's tail is printed); every host and process
is removed at the end (also on Ctrl-C or SIGTERM).
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "netns"))
sys.path.insert(0, HERE)
import netns_hosts  # noqa: E402
from swarm_scale import Peer, PeerFailed, check_alive, fail  # noqa: E402

PORT = 7000
AVG = re.compile(r"epoch (\d+): averaged gradients of (\d+) samples with (\d+) peers")
# A round's averaging on the training thread; for a delayed round
# (delay_averaging), what training waited for it.
REDUCED = re.compile(r"ms, (?:allreduce|mean by parts|sliced mean in \w+|centered_clip(?: in \w+)?(?: by parts)?) "
                     r"([0-9.]+) ms"
                     r"|training waited ([0-9.]+) ms for it")
FINAL = re.compile(r"final bpc: ([0-9.eE+-]+) after")  # charlm's validation, in bits per character
# Each codec for the gradients and for the last epoch's state averaging alike.
DEFAULT_VARIANTS = [f"{c}:strategy.options.compression={c},strategy.options.state_compression={c}"
                    for c in ("none", "fp16", "bf16", "blockwise8")]


def tx_bytes(hosts):
    """Bytes each host's eth0 sent, read from outside (ip -s -j)."""
    out = []
    for h in hosts:
        j = json.loads(subprocess.run(["ip", "-n", h.netns, "-s", "-j", "link", "show", "eth0"], check=True,
                                      capture_output=True, text=True, timeout=20).stdout)
        out.append(j[0]["stats64"]["tx"]["bytes"])
    return out


def parse_variant(text):
    name, _, sets = text.partition(":")
    if not re.fullmatch(r"[A-Za-z0-9_.+-]{1,24}", name) or not sets:
        raise SystemExit(f"swarm_links.py: --variant {text!r}: use NAME:KEY=VALUE[,KEY=VALUE...]")
    pairs = [s.split("=", 1) for s in sets.split(",")]
    if any(len(p) != 2 or not p[0] for p in pairs):
        raise SystemExit(f"swarm_links.py: --variant {text!r}: each setting is KEY=VALUE")
    return name, pairs


def run_variant(name, pairs, args, out, n_run):
    folder = os.path.join(out, name)
    os.makedirs(folder, exist_ok=True)
    target = args.target
    with netns_hosts.Hosts(prefix="loomlinks", shm_size="256m") as hosts:
        hs = [hosts.add_host(f"p{i}", rate_mbit=args.slow_mbit if args.slow_mbit and i == args.peers - 1
                             else args.rate_mbit) for i in range(args.peers)]
        sets = {"task.d_model": 384, "task.layers": 6, "task.heads": 6, "task.ffn": 1536, "trainer.batch_size": 8,
                "trainer.max_steps": args.epochs, "trainer.log_every": 1000, "trainer.val_every": 0,
                "trainer.checkpoint_every": 0, "trainer.warmup_steps": 2, "trainer.threads": 1,
                "strategy.name": "collab", "strategy.options.target_batch_size": target,
                "strategy.options.verbose": "true", "strategy.options.port": PORT,
                "strategy.options.run_id": f"links-{os.getpid()}-{n_run}", "strategy.options.min_peers": args.peers,
                "strategy.options.matchmaking_time": 3, "strategy.options.averaging_timeout": 300,
                "strategy.options.average_state_every": 0, "strategy.options.bootstrap_timeout": 120}
        before = tx_bytes(hs)
        t0 = time.monotonic()
        peers = []
        for i, h in enumerate(hs):
            argv = [args.loom, "train", os.path.join(ROOT, "examples", "configs", "charlm.toml")]
            own = dict(sets, **{"trainer.output_dir": os.path.join(folder, f"run{i}"),
                                "strategy.options.listen": h.address})
            for k, v in list(own.items()) + pairs + [s.split("=", 1) for s in args.set]:
                argv += ["--set", f"{k}={v}"]
            join = "" if i == 0 else f"{hs[0].address}:{PORT}"
            peers.append(Peer(i, h, argv, {"OMP_NUM_THREADS": "1", "LOOM_INITIAL_PEERS": join},
                              os.path.join(folder, f"peer{i}.log"), t0))
            if i == 0:
                while not peers[0].grep(re.compile(re.escape(f"listening on {h.address}:{PORT}"))):
                    check_alive(peers)
                    if time.monotonic() - t0 > 60:
                        fail(peers[0], "never listened")
                    time.sleep(0.1)
        deadline = t0 + args.timeout
        for p in peers:
            try:
                code = p.proc.wait(timeout=max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                fail(p, f"did not finish {args.epochs} epochs within --timeout {args.timeout} s")
            if code != 0:
                fail(p, f"exited with status {code}")
            p.thread.join(timeout=10)
        after = tx_bytes(hs)
    avg = peers[0].grep(AVG)
    if len(avg) < 2:
        fail(peers[0], f"averaged {len(avg)} epochs: too few to time")
    seconds = avg[-1][0] - avg[0][0]
    samples = sum(int(m[2]) for _, m in avg[1:])  # the epochs after the first one's end
    total_samples = sum(int(m[2]) for _, m in avg)
    rounds = [float(m[1] or m[2]) for p in peers for _, m in p.grep(REDUCED)]
    losses = [float(m[1]) for p in peers for _, m in p.grep(FINAL)]
    return {"variant": name, "settings": ["=".join(p) for p in pairs], "epochs_averaged": len(avg),
            "samples_per_s": samples / seconds if seconds > 0 else float("nan"),
            "mb_per_sample": sum(a - b for a, b in zip(after, before)) / 1e6 / max(1, total_samples),
            "round_ms": statistics.median(rounds) if rounds else float("nan"),
            "bits_per_char": statistics.mean(losses) if losses else float("nan"),
            "sent_mb_per_host": [(a - b) / 1e6 for a, b in zip(after, before)]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peers", type=int, default=4)
    ap.add_argument("--rate-mbit", type=float, default=100.0, help="tbf rate of every host's link, both ways")
    ap.add_argument("--slow-mbit", type=float, default=0,
                    help="tbf rate of the last host's link instead (both ways): one member on a slow link")
    ap.add_argument("--epochs", type=int, default=8, help="trainer.max_steps: collaborative epochs per variant")
    ap.add_argument("--target", type=int, default=64, help="target_batch_size (batch 8 a peer)")
    ap.add_argument("--variant", action="append", default=[], help="NAME:KEY=VALUE[,KEY=VALUE]; repeatable; "
                    "the first is the baseline (default: each codec, none first)")
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE for every peer of every variant")
    ap.add_argument("--timeout", type=float, default=900, help="seconds a variant may run")
    ap.add_argument("--loom", default=os.path.join(ROOT, "build", "bin", "loom"))
    ap.add_argument("--out", default=None, help="folder for logs and results.json (default: a new one, kept)")
    args = ap.parse_args()
    if not 2 <= args.peers <= 32 or args.epochs < 3 or not args.rate_mbit > 0 or args.target < 1:
        raise SystemExit("swarm_links.py: use 2-32 --peers, --epochs >= 3, a positive --rate-mbit and --target")
    if any("=" not in s for s in args.set):
        raise SystemExit("swarm_links.py: --set takes KEY=VALUE")
    why = netns_hosts.skip_reason()
    if why:
        raise SystemExit(f"swarm_links.py: cannot emulate hosts here: {why}")
    if not os.access(args.loom, os.X_OK):
        raise SystemExit(f"swarm_links.py: {args.loom} is missing: build first")
    variants = [parse_variant(v) for v in (args.variant or DEFAULT_VARIANTS)]
    out = args.out or tempfile.mkdtemp(prefix="loom-links-")
    os.makedirs(out, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # leaves the with blocks: hosts removed
    slow = f" (the last host's {args.slow_mbit:g})" if args.slow_mbit else ""
    print(f"{args.peers} peers, charlm, links of {args.rate_mbit:g} Mbit/s both ways{slow}, {args.epochs} epochs of "
          f"{args.target} samples per variant; logs in {out}", flush=True)
    rows = []
    try:
        for n, (name, pairs) in enumerate(variants):
            print(f"  {name} ({', '.join('='.join(p) for p in pairs)}) ...", flush=True)
            rows.append(run_variant(name, pairs, args, out, n))
    except PeerFailed as e:
        print(f"swarm_links.py: {e}", file=sys.stderr)
        return 1
    finally:
        with open(os.path.join(out, "results.json"), "w") as f:
            json.dump(rows, f, indent=1)
    base = rows[0]
    print(f"\n{'variant':<12} {'samples/s':>10} {'x':>6} {'MB/sample':>10} {'x':>6} {'round ms':>9} {'x':>6} "
          f"{'bits/char':>9} {'x':>6}")
    for r in rows:
        print(f"{r['variant']:<12} {r['samples_per_s']:>10.2f} {r['samples_per_s'] / base['samples_per_s']:>6.2f} "
              f"{r['mb_per_sample']:>10.3f} {r['mb_per_sample'] / base['mb_per_sample']:>6.2f} "
              f"{r['round_ms']:>9.0f} {r['round_ms'] / base['round_ms']:>6.2f} "
              f"{r['bits_per_char']:>9.3f} {r['bits_per_char'] / base['bits_per_char']:>6.3f}")
    print(f"x: against {base['variant']} in this run. Results: {os.path.join(out, 'results.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
