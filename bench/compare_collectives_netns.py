# SPDX-License-Identifier: Apache-2.0
"""Issue 16's collective sweep between namespaced hosts over TCP: allreduce
(f32 sum) through the ucx plugin, Open MPI over TCP (the mpi plugin under
mpirun, pml ob1, btl tcp,self), c10d Gloo and, as the physical reference,
UCX's own point-to-point tag bandwidth (ucx_perftest, UCX_TLS=tcp). Each
rank runs on its own emulated host (tests/netns/netns_hosts.py: network,
UTS, IPC, PID and mount namespaces, so no shared memory or cross-memory
attach between ranks), on one bridge of veth pairs.

This kernel has no netem: every link is a sub-millisecond LAN without added
latency or loss, and every "host" shares this machine's cores, so TCP's
kernel work competes with the ranks. --rate-mbit limits each host's link
with tbf. The machine is shared and noisy: the backends run ROUNDS times,
interleaved, each credited with its best time per size (as
compare_collectives.sh does), and the spread over rounds is printed. Rank k
(and perftest's server 0, client 1) is pinned to core k mod the core count,
for every backend alike. The p2p reference is one link, one direction,
between host 0 and host 1, also for 4 ranks. UCX_LOG_LEVEL=info in the
environment reaches the ucx ranks (their logs are under --out).

  /usr/bin/python3 bench/compare_collectives_netns.py [--build build] [--ranks 2,4]
      [--rounds 3] [--rate-mbit N] [--min-bytes 1048576] [--max-bytes 67108864]
      [--ucx-option KEY=VALUE ...]   (a ucx option to try, e.g. pipeline_depth=8)

Run as root, by Debian's python3 (torch with Gloo). It took 11-13 minutes
here (defaults, 2 cores at load 4-12; 4 ranks take about twice as long as
2). Sizes are the powers of two from --min-bytes to --max-bytes; the ratios
are taken at both ends.
Exits 1 naming what failed when any backend fails; every process ends and
every host is removed either way. `--gloo-worker` is this script's own Gloo
rank (torch.distributed, the c10d ProcessGroupGloo of the same LibTorch
compare_gloo_allreduce links): that binary binds Gloo to 127.0.0.1, which
cannot reach another host.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "netns"))
NCPU = len(os.sched_getaffinity(0))
SUBNET = "10.77.0.0/16"  # netns_hosts' bridge
MPIRUN_ADDRESS = "10.77.255.254"  # given to the bridge itself; netns_hosts numbers hosts from 10.77.0.1 up
BACKENDS = ("ucx", "mpi", "gloo")

# mpirun's rsh agent in place of ssh: `AGENT [options] HOST COMMAND...` runs
# COMMAND inside HOST's namespaces. mpirun must sit in the root PID namespace
# for this (nsenter may enter only a descendant PID namespace), so it runs in
# the bridge's network namespace and starts every rank's orted through here.
AGENT = """#!/bin/sh
while [ "${1#-}" != "$1" ]; do shift; done
host=$1; shift
pid=
for pair in $SWEEP_ANCHORS; do [ "${pair%%=*}" = "$host" ] && pid=${pair#*=}; done
[ -n "$pid" ] || { echo "rsh agent: no emulated host $host" >&2; exit 255; }
exec nsenter --target="$pid" --net --uts --ipc --mount --pid --wd=/ -- /bin/sh -c "$*"
"""


class Failed(RuntimeError):
    """A backend or a step failed; the message says which and why."""


def iterations(size, base=512 << 20):
    """Timed iterations per size, as loom bench collective chooses them."""
    return max(5, min(1000, base // size))


def sizes(lo, hi):
    out = []
    while lo <= hi:
        out.append(lo)
        lo *= 2
    return out


def gloo_worker(args):
    """One Gloo rank (torchrun's variables); rank 0 writes compare_gloo_allreduce's JSON."""
    import datetime
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    results, valid_all = [], True
    for size in sizes(args.min_bytes, args.max_bytes):
        count = size // 4
        pattern = (torch.arange(count, dtype=torch.int64) % 7).float()
        t = pattern + (rank + 1)
        dist.all_reduce(t)  # validated, and the first warm-up
        ok = torch.tensor([1.0 if t.equal(pattern * world + world * (world + 1) // 2) else 0.0])
        dist.all_reduce(ok, op=dist.ReduceOp.MIN)
        valid = ok.item() == 1.0
        valid_all = valid_all and valid
        iters = args.iters or iterations(size)
        for _ in range(2):
            dist.all_reduce(t)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        mean = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
        dist.all_reduce(mean)
        seconds = mean.item() / world
        algbw = size / seconds / 1e9
        results.append({"bytes": size, "count": count, "iters": iters, "time_us": seconds * 1e6,
                        "algbw_gbps": algbw, "busbw_gbps": algbw * 2 * (world - 1) / world, "valid": valid})
    if rank == 0:
        with open(args.json, "w") as f:
            json.dump({"plugin": "gloo", "op": "allreduce", "dtype": "f32", "ranks": world, "results": results}, f)
    dist.destroy_process_group()
    return 0 if valid_all else 1


def tail(path, n=1500):
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:].strip()
    except OSError as e:
        return f"(no log: {e})"


def kill_group(proc):
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def wait_all(what, procs, logs, timeout):
    """Waits for every process; on the first failure or at the deadline kills
    the rest and raises Failed with the failing process's log tail."""
    deadline = time.monotonic() + timeout
    while True:
        bad = [(p, log) for p, log in zip(procs, logs) if p.poll() not in (None, 0)]
        late = time.monotonic() > deadline
        if bad or late:
            for p in procs:
                kill_group(p)
            for p in procs:
                p.wait()
            if bad:
                p, log = bad[0]
                others = "".join(f"\n{other}: ...{tail(other, 300)}" for other in logs if other != log)
                raise Failed(f"{what}: {log} exited {p.returncode}:\n{tail(log)}{others}")
            raise Failed(f"{what}: not finished within {timeout} s (--timeout); {logs[0]}:\n{tail(logs[0])}")
        if all(p.poll() == 0 for p in procs):
            return
        time.sleep(0.05)


def read_json(what, path):
    try:
        with open(path) as f:
            results = json.load(f)["results"]
    except (OSError, ValueError, KeyError) as e:
        raise Failed(f"{what}: no results in {path}: {e}") from None
    if not all(r["valid"] for r in results):
        raise Failed(f"{what}: some results were wrong ({path})")
    return {r["bytes"]: r for r in results}


class Sweep:
    def __init__(self, args, hosts, switch, out, scratch):
        self.args, self.hosts, self.switch, self.out, self.scratch = args, hosts, switch, out, scratch
        self.n = len(hosts)
        self.port = 20000  # MASTER_PORT, a fresh one every run (no wait on TIME_WAIT)
        self.size_args = ["--min-bytes", str(args.min_bytes), "--max-bytes", str(args.max_bytes)]
        if args.iters:
            self.size_args += ["--iters", str(args.iters)]

    def log(self, name, r, rank="all"):
        return os.path.join(self.out, "logs", f"{name}.{r}.{rank}.log")

    def per_host(self, name, r, argv_of, env_of):
        """Starts rank k of a torchrun-style job on host k, pinned to core k mod NCPU."""
        self.port += 1
        procs, logs = [], []
        for k, host in enumerate(self.hosts):
            env = {"RANK": str(k), "WORLD_SIZE": str(self.n), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                   "MASTER_ADDR": self.hosts[0].address, "MASTER_PORT": str(self.port)}
            env.update(env_of(k, host))
            logs.append(self.log(name, r, k))
            procs.append(host.popen(["taskset", "-c", str(k % NCPU)] + argv_of(k, host), env=env,
                                    log_path=logs[-1], stdin=subprocess.DEVNULL))
        wait_all(f"{name} round {r} ({self.n} ranks)", procs, logs, self.args.timeout)

    def ucx(self, r, path):
        def config(k, host):
            # Each rank's UCX listens on its own host's address (sets UCX_NET_DEVICES): TCP only.
            toml = os.path.join(self.scratch, f"ucx.{k}.toml")
            with open(toml, "w") as f:
                f.write('[collective]\nname = "ucx"\n[collective.options]\ntransports = ["tcp"]\n'
                        f'cma_threshold_bytes = -1\nlisten = "{host.address}"\n')
                for item in self.args.ucx_option:  # KEY=VALUE, as TOML
                    f.write(item.split("=", 1)[0].strip() + " = " + item.split("=", 1)[1].strip() + "\n")
            return [self.args.loom, "--config", toml, "bench", "collective", "--plugin", "ucx",
                    "--json", path] + self.size_args
        self.per_host("ucx", r, config, lambda k, host: {})

    def gloo(self, r, path):
        argv = ["/usr/bin/python3", os.path.abspath(__file__), "--gloo-worker", "--json", path] + self.size_args
        self.per_host("gloo", r, lambda k, host: argv, lambda k, host: {"GLOO_SOCKET_IFNAME": "eth0"})

    def mpi(self, r, path):
        log = self.log("mpi", r)
        argv = ["nsenter", f"--net=/run/netns/{self.switch}", "--", "mpirun", "--allow-run-as-root",
                "-np", str(self.n), "--host", ",".join(f"{h.address}:1" for h in self.hosts),
                "--mca", "plm_rsh_agent", os.path.join(self.scratch, "agent.sh"),
                "--mca", "plm_rsh_no_tree_spawn", "1",  # a daemon cannot nsenter into a sibling host
                "--mca", "pml", "ob1", "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", SUBNET,
                "--mca", "oob_tcp_if_include", SUBNET, "--bind-to", "none",  # pinned as the other backends are:
                "sh", "-c", f'exec taskset -c $((OMPI_COMM_WORLD_RANK % {NCPU})) "$@"', "sh",
                self.args.loom, "bench", "collective", "--plugin", "mpi", "--json", path] + self.size_args
        env = dict(os.environ, SWEEP_ANCHORS=" ".join(f"{h.address}={h.anchor_pid}" for h in self.hosts))
        with open(log, "w") as f:
            proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        wait_all(f"mpi round {r} ({self.n} ranks, mpirun)", [proc], [log], self.args.timeout)

    def perftest(self, r, size):
        """ucx_perftest tag_bw, server on host 0, client on host 1; GB/s (1e9 B/s)."""
        self.port += 1
        env = {"UCX_TLS": "tcp", "UCX_NET_DEVICES": "eth0"}
        common = ["-t", "tag_bw", "-s", str(size), "-n", str(self.args.iters or iterations(size, 1 << 30)),
                  "-w", "5", "-p", str(self.port)]
        logs = [self.log(f"perftest-{size}", r, k) for k in ("server", "client")]
        server = self.hosts[0].popen(["taskset", "-c", "0", "ucx_perftest"] + common, env=env, log_path=logs[0],
                                     stdin=subprocess.DEVNULL)
        time.sleep(1)  # the server listening (as compare_collectives.sh waits)
        client = self.hosts[1].popen(["taskset", "-c", str(1 % NCPU), "ucx_perftest", self.hosts[0].address, "-f"]
                                     + common, env=env, log_path=logs[1], stdin=subprocess.DEVNULL)
        wait_all(f"ucx_perftest {size} B round {r}", [client, server], logs[::-1], self.args.timeout)
        # -f's last line: iterations, latency 50%ile/avg/overall (us), bandwidth avg/overall (MB/s = 2^20 B/s),
        # rates; "avg" is the last report interval's (with tbf it was 0.43x the whole run), "overall" the run's.
        try:
            return float(tail(logs[1], 300).splitlines()[-1].split()[5]) * 1048576 / 1e9
        except (IndexError, ValueError):
            raise Failed(f"ucx_perftest {size} B round {r}: no bandwidth in {logs[1]}:\n{tail(logs[1])}") from None

    def run(self):
        """ROUNDS interleaved rounds; returns ({backend: [per-round {bytes: result}]}, {bytes: [GB/s per round]})."""
        os.makedirs(os.path.join(self.out, "logs"), exist_ok=True)
        runs, p2p = {b: [] for b in BACKENDS}, {s: [] for s in (self.args.min_bytes, self.args.max_bytes)}
        for r in range(1, self.args.rounds + 1):
            print(f"== {self.n} ranks, round {r} (load {load()})", flush=True)
            for b in BACKENDS:
                path = os.path.join(self.out, f"{b}.{r}.json")
                t0 = time.monotonic()
                getattr(self, b)(r, path)
                runs[b].append(read_json(f"{b} round {r} ({self.n} ranks)", path))
                row = runs[b][-1]
                print(f"   {b:5s} busbw " + ", ".join(f"{s} B {row[s]['busbw_gbps']:.3f}" for s in p2p if s in row)
                      + f" GB/s ({time.monotonic() - t0:.0f} s)", flush=True)
            for s in p2p:
                p2p[s].append(self.perftest(r, s))
            print("   ucx_perftest tag_bw " + ", ".join(f"{s} B {v[-1]:.3f}" for s, v in p2p.items()) + " GB/s",
                  flush=True)
        return runs, p2p


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def summary(args, measured):
    """The table: best busbw per backend, ucx_perftest, issue 16's ratios, spread over rounds."""
    from compare_collectives_table import best
    ends = sorted({args.min_bytes, args.max_bytes})
    rate = f"tbf {args.rate_mbit} Mbit/s per host" if args.rate_mbit else "no rate limit"
    print(f"\n# allreduce f32 sum, one rank per namespaced host, TCP over veth + bridge ({rate}; no netem: "
          f"no added latency), {NCPU} shared cores; best of {args.rounds} round(s), busbw GB/s")
    print("# p2p = ucx_perftest tag_bw, UCX_TLS=tcp, host 0 -> host 1 (one link, one direction)")
    head = "%-5s %-9s" + " %7s" * 4 + " | %7s %7s %8s"
    print(head % ("ranks", "bytes", "ucx", "mpi", "gloo", "p2p", "ucx/p2p", "ucx/mpi", "ucx/gloo"))
    checks = []
    for n, (runs, p2p) in measured.items():
        bests = {b: best(runs[b]) for b in BACKENDS}
        for size in sorted(bests["ucx"]):
            bw = {b: bests[b][size]["busbw_gbps"] for b in BACKENDS if size in bests[b]}
            bw["p2p"] = max(p2p[size]) if size in p2p else None
            ratio = {d: bw["ucx"] / bw[d] if bw.get(d) else None for d in ("p2p", "mpi", "gloo")}
            cells = ["%.3f" % bw[k] if bw.get(k) else "-" for k in ("ucx", "mpi", "gloo", "p2p")]
            cells += ["%.2f" % ratio[k] if ratio[k] else "-" for k in ("p2p", "mpi", "gloo")]
            print(head % tuple([n, size] + cells))
            if size in ends:
                checks += [(n, size, "ucx / p2p", ratio["p2p"], 0.8), (n, size, "ucx / mpi", ratio["mpi"], 1.2)]
                if size == args.max_bytes:
                    checks.append((n, size, "ucx / gloo", ratio["gloo"], 2.0))
    print("\n# busbw every round (GB/s), spread = max / min")
    for n, (runs, p2p) in measured.items():
        for size in ends:
            for b in BACKENDS:
                values = [run[size]["busbw_gbps"] for run in runs[b] if size in run]
                print("%-5s %-9d %-5s %s   spread %.2f" % (n, size, b, ", ".join("%.3f" % v for v in values),
                                                          max(values) / min(values)))
            print("%-5s %-9d %-5s %s   spread %.2f" % (n, size, "p2p", ", ".join("%.3f" % v for v in p2p[size]),
                                                     max(p2p[size]) / min(p2p[size])))
    print("\n# targets (issue 16), measured in this run")
    for n, size, label, value, target in checks:
        verdict = "n/a" if value is None else ("met" if value >= target else "MISSED")
        print("%d ranks, %9d B: %-11s %6s   target >= %.1f   %s"
              % (n, size, label, "-" if value is None else "%.2f" % value, target, verdict))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=os.path.join(HERE, "..", "build"), help="build folder with bin/loom")
    p.add_argument("--out", default=None, help="JSON and logs (default: a new folder under /tmp)")
    p.add_argument("--ranks", default="2,4", help="host counts, comma-separated (one rank per host)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rate-mbit", type=float, default=None, help="tbf limit on every host's link")
    p.add_argument("--min-bytes", type=int, default=1 << 20)
    p.add_argument("--max-bytes", type=int, default=64 << 20)
    p.add_argument("--iters", type=int, default=0, help="timed iterations per size (0: by size)")
    p.add_argument("--timeout", type=int, default=600, help="seconds one backend's run may take")
    p.add_argument("--ucx-option", action="append", default=[], metavar="KEY=VALUE",
                   help="a [collective.options] line for the ucx ranks (TOML value; repeatable), to try a setting")
    p.add_argument("--gloo-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--json", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.gloo_worker:
        return gloo_worker(args)
    if os.geteuid() != 0:
        print("compare_collectives_netns.py: needs root (namespaces, veth pairs, mounts)", file=sys.stderr)
        return 1
    args.loom = os.path.join(os.path.abspath(args.build), "bin", "loom")
    counts = [int(x) for x in args.ranks.split(",")]
    missing = [t for t in (args.loom, "mpirun", "ucx_perftest", "nsenter", "taskset") if not shutil.which(t)]
    bad = [o for o in args.ucx_option if "=" not in o or not o.split("=", 1)[0].strip()]
    if bad:
        p.error(f"--ucx-option takes KEY=VALUE (a TOML value), not {bad[0]!r}")
    if missing or min(counts) < 2 or args.min_bytes > args.max_bytes or args.min_bytes % 4:
        p.error(f"missing {missing}" if missing else "--ranks at least 2; --min-bytes a multiple of 4, <= --max-bytes")
    out = args.out or tempfile.mkdtemp(prefix="loom-compare-netns-")

    def interrupted(signo, _frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the cleanup below must not be cut short
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise Failed(f"interrupted by signal {signo}")
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)

    from netns_hosts import Hosts, HostsError, _ip
    start, measured = time.monotonic(), {}
    with tempfile.TemporaryDirectory(prefix="loom-sweep-") as scratch:
        agent = os.path.join(scratch, "agent.sh")
        with open(agent, "w") as f:
            f.write(AGENT)
        os.chmod(agent, 0o755)
        os.chmod(scratch, 0o755)
        try:
            for n in counts:
                with Hosts(prefix="loomsweep") as hosts:
                    made = [hosts.add_host(f"h{k}", rate_mbit=args.rate_mbit) for k in range(n)]
                    _ip(hosts.switch, f"addr add {MPIRUN_ADDRESS}/16 dev br0")  # mpirun's address
                    measured[n] = Sweep(args, made, hosts.switch, os.path.join(out, f"ranks{n}"), scratch).run()
        except (Failed, HostsError) as e:
            print(f"\nFAILED: {e}\n(logs in {out})", file=sys.stderr)
            return 1
    summary(args, measured)
    print(f"\n# {time.monotonic() - start:.0f} s in all; load at the end {load()}; JSON and logs in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
