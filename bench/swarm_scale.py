#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Swarm scale benchmark (issue 16's bench/swarm_scale.sh): swarms of collab
peers, one per emulated host (tests/netns/netns_hosts.py: own network, UTS,
IPC, PID and mount namespaces on one bridge), teacher task, 1 thread each.
Every peer listens on its host's address and joins through the first.

Per size it prints one row: time from the first peer's start to the first
averaged epoch; samples per round against target_batch_size (one value per
group, from the "averaged gradients of S samples" lines); median matchmaking
(the training thread's wait for its group) and round time; the epoch's
duration and the barrier's share of it; UDP datagrams and bytes per peer per
second, and receive-buffer drops, read inside each host before and after the
measured window (/proc/net/snmp's Udp: line; bytes from an nftables counter,
as /proc/net/dev mixes in UCX's TCP allreduce traffic; so UDP is the DHT);
peak RSS per peer; the spread of epochs when the peers are stopped (SIGTERM);
and the datagrams of the shutdown; what each peer's DHT node held at its
teardown (searches, the nodes listed in them, how many of those are silent).
Then issue 16's 64-peer targets, PASS/FAIL.

The barrier is the wait of the group's last meeting: a group formed ahead
first meets early ("brought X of T samples"; the share of the target at that
meeting is printed), its members top up the rest and meet again; only that
second wait is logged with a time. --dissect counts one host's DHT
datagrams by OpenDHT method and key (progress records named) from a raw
socket: where the traffic comes from; and the first peer's host from the
first SIGTERM on (the shutdown's traffic).

There is no netem on this kernel: every link is a sub-millisecond LAN with
no latency or loss, so matchmaking and round times are lower bounds of what
real links give. The CPUs are shared by all peers: on a small machine the
epoch's length (and so the DHT traffic per epoch) reflects that.
--churn F kills (SIGKILL) a fraction F of the swarm per minute during the
window, one peer at a time at even spacing, and restarts each on its host
after --churn-down seconds as a joiner (issue 16: 25% of 64 peers per
minute for 5 minutes, `--churn 0.25 --seconds 300`). The first peer, every
joiner's seed, is never killed. It then judges: no stall (every peer up for
a whole minute of the window advanced an epoch in it), no partition (every
10 s, the epochs of the peers up since the start, or restarted a minute
ago or more, within 2 of each other; a peer's epoch is the last its log
named), nothing leaked
(descriptors and RSS of the peers never killed, first minute against last),
and how long a restarted peer took to load the state and to average again.

Run as root with Debian's python3:
  /usr/bin/python3 bench/swarm_scale.py --peers 4,16,64 --seconds 120
Exit 1 when a peer fails (its log's tail is printed); every host and
process is removed at the end (also on Ctrl-C or SIGTERM).
"""
import argparse
import collections
import concurrent.futures
import hashlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "netns"))
import netns_hosts  # noqa: E402
from swarm_churn import Churn, churn_verdicts, loom_pid, med  # noqa: E402

PORT = 7000
BATCH = 64  # teacher.toml's batch_size: "one batch per member" in the target
# UDP counters of the whole host (one peer each); priority before any filter.
NFT = """table inet loomscale {
  chain i { type filter hook input priority -300; meta l4proto udp counter; }
  chain o { type filter hook output priority -300; meta l4proto udp counter; }
}"""
PROBE = "cat /proc/net/snmp; nft list table inet loomscale"
# A group's round; with target_group_size, one part of the round's whole
# ("a bounded group of the N that met"), whose target is its share of it.
AVG = re.compile(r"epoch (\d+): averaged gradients of (\d+) samples with (\d+) peers \(epoch \d+, attempt (\d+)"
                 r"(?:, a bounded group of the (\d+) that met)?\) \(matchmaking ([0-9.]+) ms")
# A round whose group was a small part of the swarm: its target was capped
# (health.h's swarm_capped_target) and is judged against that.
CAPPED = re.compile(r"epoch (\d+): averaged gradients of (\d+) samples with \d+ peers \(epoch \d+, attempt (\d+)"
                    r".*its target capped at (\d+) by its part of the swarm")
BROUGHT = re.compile(r"epoch (\d+): \d+ peers \(epoch \d+, attempt \d+[^)]*\) brought (\d+) of (\d+) samples; this peer adds")
TRAINING = re.compile(r"\] training \S+ \(\d+ parameters\)")
ROUND = re.compile(r"epoch (\d+): round ([0-9.]+) ms from the group's meeting")
# A peer's last line on its progress reads (at exit): DHT reads and reads of
# peers' tables over TCP (progress_source = "peers"), which /proc/net/snmp's
# Udp: line does not see.
READS = re.compile(r"read the swarm's progress (\d+) times in (\d+) s .*; (\d+) DHT reads \([0-9.]+ a second\), "
                   r"(\d+) of peers' tables \((\d+) failed, (\d+) bytes\)")
# A peer's DHT requests at exit, by kind (OpenDHT's counts; each get of N
# values pages through N + 1 requests per node) and the watches it began.
REQUESTS = re.compile(r"DHT requests sent in (\d+) s: (\d+) gets, (\d+) listens, (\d+) puts, (\d+) finds, (\d+) pings; "
                      r"(\d+) watches begun")
# A peer's teardown: what its OpenDHT node held (SwarmDht::held), most of a
# long-lived peer's memory growth under churn (README, "OpenDHT's searches
# under churn").
HELD = re.compile(r"the DHT node holds (\d+) searches over (\d+) nodes \((\d+) of them silent")
# Counts the DHT's queries by OpenDHT method and key on one host (--dissect):
# msgpack's "q": "<method>" and "h": <20-byte hash>; replies carry neither.
SNIFF = r"""
import collections, json, re, socket, sys, time
until, names = time.monotonic() + float(sys.argv[2]), json.loads(sys.argv[3])  # argv[1]: the host's address
# argv[4], if given: count from that CLOCK_MONOTONIC time on (every namespace
# here shares the clock), so that the count starts when the caller says.
since = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
until = max(until, since + float(sys.argv[2]))
# Every interface, sent or received by the packet's direction. Loopback
# shows each packet twice: its outgoing copy is counted.
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3)); s.settimeout(0.2)
n, b, asked = collections.Counter(), collections.Counter(), {}
while time.monotonic() < until:
    try: p, (ifname, _, pkttype, _, _) = s.recvfrom(65535)
    except socket.timeout: continue
    if ifname == "lo" and pkttype != socket.PACKET_OUTGOING: continue
    if time.monotonic() < since: continue
    p, ipv4 = p[14:], p[12:14] == b"\x08\x00"  # ETH_P_ALL: outgoing ones too
    if not ipv4 or p[9] != 17: continue
    load = p[(p[0] & 15) * 4 + 8:]
    # Methods have 3 letters or more: a "y": "q" followed by the key "v"
    # (the user agent) is not one. OpenDHT's notices of refreshed or
    # expired values to a listener put "y" first (tellListener).
    q = re.search(rb"\xa1q([\xa3-\xaf])", load)
    what = load[q.end():q.end() + q[1][0] - 0xa0].decode("ascii", "replace") if q else "reply/other"
    if what == "update" and re.search(rb"\xa3exp(?:[\x90-\x9f]|\xdc)", load): what = "update (expired)"
    elif what == "update" and re.search(rb"\xa2re(?:[\x90-\x9f]|\xdc)", load): what = "update (refreshed)"
    h = re.search(rb"\xa1h\xc4\x14", load) if q else None
    key = names.get(load[h.end():h.end() + 20].hex(), "key " + load[h.end():h.end() + 3].hex()) if h else ""
    sent = pkttype == socket.PACKET_OUTGOING
    # A reply names its request by the requester's transaction id ("t"):
    # the request's method and key, as seen from this host. Each side
    # numbers its own requests, so the same id goes both ways: a request
    # is filed by who sent it, and a reply looked up on the other side.
    t = re.search(rb"\xa1t(?:([\x00-\x7f])|\xcc(.)|\xcd(..)|\xce(....))", load, re.S)
    tid = (p[16:20] if sent else p[12:16]) + (next(g for g in t.groups() if g is not None) if t else b"")
    if q and t: asked[(sent, tid)] = what + (" " + key if key else "")
    elif not q and t and (not sent, tid) in asked: what, key = "reply to " + asked[(not sent, tid)], ""
    k = ("sent " if sent else "received ") + ("" if ifname == "eth0" else ifname + " ") + what + (" " + key if key else "")
    n[k] += 1; b[k] += len(load)
print(json.dumps({k: [n[k], b[k]] for k in n}))
"""


# How long --dissect also watches one host from the first SIGTERM on.
SHUTDOWN_SNIFF_S = 20


class PeerFailed(RuntimeError):
    pass


class Peer:
    """One loom train process on its host; a thread stamps its output lines
    (the log has no times) and writes them to its log file."""

    def __init__(self, i, host, argv, env, log_path, t0):
        self.i, self.host, self.log_path, self.lines = i, host, log_path, []
        self.proc = host.popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
        self.thread = threading.Thread(target=self._read, args=(t0,), daemon=True)
        self.thread.start()

    def _read(self, t0):
        with open(self.log_path, "w", buffering=1) as log:  # line by line: a live log can be watched
            for raw in iter(self.proc.stdout.readline, b""):
                t, text = time.monotonic() - t0, raw.decode(errors="replace").rstrip("\n")
                self.lines.append((t, text))
                log.write(f"{t:9.3f} {text}\n")

    def stop(self):
        # SIGTERM to loom itself: nsenter (proc) would die of it and lose loom's exit status.
        pid = loom_pid(self)
        try:
            if pid:
                os.kill(pid, signal.SIGTERM)
        except OSError:
            pass  # already gone: its exit status tells

    def name(self):
        return f"peer {self.i} on host {self.host.name} ({self.host.address})"

    def tail(self, n=25):
        return "\n".join(f"    {t:9.3f} {text}" for t, text in self.lines[-n:])

    def grep(self, pattern, t_from=0.0, t_to=float("inf")):
        return [(t, m) for t, text in list(self.lines) if t_from <= t <= t_to for m in [pattern.search(text)] if m]


def fail(peer, why):
    peer.thread.join(timeout=5)  # its last lines, when it exited
    raise PeerFailed(f"{peer.name()} {why}; log {peer.log_path}, its end:\n{peer.tail()}")


def check_alive(peers):
    for p in peers:
        if p.proc.poll() is not None:
            fail(p, f"exited with status {p.proc.returncode} before it was stopped")


def counters(host):
    """(time, {udp counters}) read inside the host."""
    t = time.monotonic()
    out = host.run(["sh", "-c", PROBE], timeout=60).stdout
    udp = [line.split()[1:] for line in out.splitlines() if line.startswith("Udp:")]
    c = {k: int(v) for k, v in zip(udp[0], udp[1])}
    nft = re.findall(r"chain ([io]) \{.*?counter packets (\d+) bytes (\d+)", out, re.S)
    c.update({f"{d}_bytes": int(b) for d, _, b in nft})
    return (t + time.monotonic()) / 2, c


def read_all(hosts):
    """Every host's counters, read together: one at a time, 64 loaded hosts
    took seconds, and the first host's reading was that much older than the
    last's (a shutdown's count then took in the seconds before it)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
        return list(pool.map(counters, hosts))


def cpu_times():
    """The machine's CPU time so far, (idle, total) in clock ticks, from
    /proc/stat (idle and iowait count as idle): every host shares its CPUs."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return ticks[3] + ticks[4], sum(ticks[:8])


def thread_times():
    """CPU ticks of every thread of every loom process on the machine, by
    (pid, tid): (thread name, ticks). A process's first thread is its
    training thread ("training"); the collab strategy names its own
    (collab-bg, collab-serve, ...); OpenDHT's and other libraries' threads
    keep the process's name ("loom")."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() != "loom":
                    continue
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    stat = f.read()
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    name = f.read().strip()
                fields = stat[stat.rindex(")") + 2:].split()
                if tid == pid:
                    name = "training"
                out[pid, tid] = (name, int(fields[11]) + int(fields[12]))
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue  # a thread or process that ended meanwhile
    return out


def thread_cpu(before, after, seconds):
    """ms of CPU a second per peer by thread name, over threads alive at both readings."""
    hz = os.sysconf("SC_CLK_TCK")
    by, procs = collections.Counter(), set()
    for key, (name, ticks) in after.items():
        if key in before:
            by[name] += ticks - before[key][1]
            procs.add(key[0])
    n = max(1, len(procs))
    return {name: 1000.0 * t / hz / seconds / n for name, t in by.most_common()}


def rates(before, after, key):
    """key's per-second rate on each host between two readings."""
    return [(a[1].get(key, 0) - b[1].get(key, 0)) / (a[0] - b[0]) for b, a in zip(before, after)]


def run_size(n, args, out, run_no):
    target = args.target
    run_id = f"scale{n}-{os.getpid()}-{run_no}"
    folder = os.path.join(out, f"{n}peers")
    os.makedirs(folder, exist_ok=True)
    with netns_hosts.Hosts(prefix="loomscale", shm_size="256m") as hosts:
        made = time.monotonic()
        hs = [hosts.add_host(f"p{i}") for i in range(n)]
        for h in hs:
            h.run(["nft", "-f", "-"], input=NFT)
        print(f"  {n} hosts made in {time.monotonic() - made:.1f} s", flush=True)
        sets = {"trainer.max_steps": 10 ** 7, "trainer.threads": args.threads, "trainer.log_every": 10 ** 6,
                "trainer.val_every": 0, "trainer.checkpoint_every": 0, "strategy.name": "collab",
                "strategy.options.target_batch_size": target, "strategy.options.port": PORT,
                "strategy.options.run_id": run_id, "strategy.options.min_peers": n,
                "strategy.options.bootstrap_timeout": 60 + 2 * n, "strategy.options.verbose": "true"}
        env = {"OMP_NUM_THREADS": str(args.threads)}
        peers = []
        t0 = time.monotonic()

        def start(i, join, life=0):
            # A restarted peer (life > 0) is a joiner with its own log and folder;
            # it needs no min_peers: the swarm is there.
            tag = f"{i}.{life}" if life else f"{i}"
            argv = [args.loom, "train", os.path.join(ROOT, "examples", "configs", "teacher.toml")]
            own = dict(sets, **{"trainer.output_dir": os.path.join(folder, f"run{tag}"),
                                "strategy.options.listen": hs[i].address})
            if life:
                own["strategy.options.min_peers"] = 1
            for k, v in list(own.items()) + [tuple(s.split("=", 1)) for s in args.set]:
                argv += ["--set", f"{k}={v}"]
            peer = Peer(i, hs[i], argv, dict(env, LOOM_INITIAL_PEERS=join), os.path.join(folder, f"peer{tag}.log"), t0)
            peer.life, peer.started = life, time.monotonic() - t0
            return peer

        peers.append(start(0, ""))
        listening = re.compile(re.escape(f"listening on {hs[0].address}:{PORT}"))
        while not peers[0].grep(listening):
            check_alive(peers)
            if time.monotonic() - t0 > 60 + n:
                fail(peers[0], "never listened")
            time.sleep(0.1)
        for i in range(1, n):
            # The first peer, and --initial-peers - 1 of those started before (a
            # fixed pick per peer): one seed for 64 joiners is a bottleneck of its own.
            seeds = [0] + random.Random(i).sample(range(1, i), min(args.initial_peers - 1, i - 1))
            peers.append(start(i, ",".join(f"{hs[j].address}:{PORT}" for j in seeds)))
        # The window opens once the swarm averaged, after a warm-up.
        while not any(p.grep(AVG) for p in peers):
            check_alive(peers)
            if time.monotonic() - t0 > 120 + 3 * n:
                fail(peers[0], f"saw no averaged epoch in {time.monotonic() - t0:.0f} s (nor did any other peer)")
            time.sleep(0.2)
        first_avg = min(p.grep(AVG)[0][0] for p in peers if p.grep(AVG))
        # Churn begins once every peer has left its setup: one still waiting
        # for min_peers = n when the first was killed never saw n, and died at
        # bootstrap_timeout (6 peers of one run).
        while args.churn and not all(p.grep(TRAINING) for p in peers):
            check_alive(peers)
            if time.monotonic() - t0 > 240 + 3 * n:
                late = [p.i for p in peers if not p.grep(TRAINING)]
                fail(peers[late[0]], f"peers {late} had not begun training {time.monotonic() - t0:.0f} s in")
            time.sleep(0.2)
        time.sleep(args.warmup)
        check_alive(peers)
        sniff = None
        if args.dissect:
            names = {hashlib.sha1(f"loom/{run_id}/progress".encode()).hexdigest(): "progress"}
            sniff = hs[-1].popen([sys.executable, "-c", SNIFF, hs[-1].address, args.seconds, json.dumps(names)],
                                 stdout=subprocess.PIPE, text=True)
        cpu0, threads0 = cpu_times(), thread_times()
        before = read_all(hs)
        w0 = before[0][0] - t0
        churn = Churn(args, peers, hs, start, t0, w0, PORT, AVG, fail) if args.churn else None
        while time.monotonic() - t0 < w0 + args.seconds:
            if churn:
                churn.reap()  # a peer that died on its own is a finding, not the end of the run
            check_alive([p for p in peers if p])
            if churn:
                churn.tick()
            time.sleep(0.2 if churn else 0.5)
        after = read_all(hs)
        cpu1 = cpu_times()
        threads1 = thread_times()
        w1 = after[-1][0] - t0
        if churn:
            churn.finish()
        check_alive(peers)
        dissected = json.loads(sniff.communicate(timeout=60)[0] or "{}") if sniff else None
        # --dissect: the same count over the shutdown on the first peer's host
        # (the peers started first sent the most then: 64 peers, 2026-12-06),
        # until its peer has exited and some seconds after.
        # It counts from `since`, 2 s on, once it has surely started.
        since = time.monotonic() + 2.0
        sniff_stop = (hs[0].popen([sys.executable, "-c", SNIFF, hs[0].address, str(SHUTDOWN_SNIFF_S), json.dumps(names),
                                   repr(since)], stdout=subprocess.PIPE, text=True) if args.dissect else None)
        if sniff_stop:
            time.sleep(max(0.0, since - time.monotonic()))
        # The shutdown counts from here: `after` is the window's end, and the
        # swarm trained on while the churn ended and the sniffer finished.
        at_stop = read_all(hs)
        stopped = time.monotonic()
        for p in peers:
            p.stop()
        # Every peer's exit, polled together: when each one left.
        exits = {}
        while len(exits) < len(peers):
            for k, p in enumerate(peers):
                if k not in exits and p.proc.poll() is not None:
                    exits[k] = time.monotonic() - stopped
                    if p.proc.returncode != 0:
                        fail(p, f"exited with status {p.proc.returncode} after SIGTERM")
            if time.monotonic() - stopped > 60 + n:
                late = [peers[k] for k in range(len(peers)) if k not in exits]
                fail(late[0], f"did not exit within {60 + n} s of SIGTERM (nor did {len(late) - 1} others)")
            time.sleep(0.05)
        shutdown_s = time.monotonic() - stopped
        final = read_all(hs)
        for p in peers:
            p.thread.join(timeout=10)
        dissected_stop = json.loads(sniff_stop.communicate(timeout=60)[0] or "{}") if sniff_stop else None
    everyone = peers + (churn.gone if churn else [])  # every incarnation
    # Rounds in the window, one per group (all its members log the same line).
    # A part's samples count as its share of the whole (samples x met /
    # members), and each member's line as 1/members of the swarm's samples.
    groups, mm, rounds, shares, epoch_s, swarm_samples = {}, [], [], [], [], 0.0
    capped = {}  # (epoch, attempt, samples) -> the capped target
    lines = collections.Counter()  # members' lines of each group key
    by_epoch, cohorts = collections.defaultdict(float), collections.defaultdict(set)  # the swarm's samples an epoch
    for p in everyone:
        for t, m in p.grep(CAPPED, w0, w1):
            capped[int(m[1]), int(m[3]), int(m[2])] = int(m[4])
        for t, m in p.grep(AVG, w0, w1):
            s_, k_, of_ = int(m[2]), int(m[3]), int(m[5] or 0)
            key = (int(m[1]), int(m[4]), s_, k_, of_)
            lines[key] += 1
            groups[key] = (s_, k_, of_, capped.get((int(m[1]), int(m[4]), s_)))
            swarm_samples += s_ / k_
            # Each member logs its group's line: samples / members per line
            # counts each group once, at every attempt of the epoch.
            by_epoch[int(m[1])] += s_ / k_
            cohorts[int(m[1])].add(int(m[4]))
            mm.append(float(m[6]))
        rounds += [float(m[2]) for _, m in p.grep(ROUND, w0, w1)]
        # An epoch lasts from one round line (its end) to the next; the
        # barrier is that epoch's matchmaking wait.
        ends = {int(m[1]): t for t, m in p.grep(ROUND)}
        waits = {int(m[1]): float(m[6]) for t, m in p.grep(AVG, w0, w1)}
        for e, w in waits.items():
            if e in ends and e - 1 in ends and ends[e] <= w1:
                epoch_s.append(ends[e] - ends[e - 1])
                shares.append(w / 1000 / epoch_s[-1])
    first_meet = {}  # epoch -> share of its target a group held when it first met (then topped up)
    for p in everyone:
        for t, m in p.grep(BROUGHT, w0, w1):
            first_meet[int(m[1])] = min(first_meet.get(int(m[1]), 1.0), int(m[2]) / max(1, int(m[3])))
    reads = [m for p in everyone for _, m in p.grep(READS)[-1:]]
    per_s = lambda k: [int(m[k]) / max(1, int(m[2])) for m in reads]  # over each peer's whole run
    requests = [m for p in everyone for _, m in p.grep(REQUESTS)[-1:]]
    req_s = lambda k: med([int(m[k]) / max(1, int(m[1])) for m in requests]) if requests else None
    # Groups at one attempt often average the same samples (whole batches
    # of one part): one line a member, so a key's lines / members groups.
    rounds_seen = [g for key, g in groups.items() for _ in range(max(1, -(-lines[key] // g[1])))]
    samples = [s * of // k if of else s for s, k, of, _ in rounds_seen]
    # The swarm's samples an epoch: every group's round at it, all attempts
    # (cohorts that met apart each bring their parts). The window's first
    # and last epochs are partly outside it.
    inner = sorted(by_epoch)[1:-1]
    epoch_ratio = [by_epoch[e] / target for e in inner]
    part = lambda k, of: -(-target * k // of) if of else target  # group_split.h's part_target
    # A capped round's target is the cap (a part's share of the swarm); one
    # that met over its cap averaged what it had, short of its part.
    in_range = [(cap or part(k, of)) <= s <= part(k, of) + k * BATCH for s, k, of, cap in rounds_seen]
    last = [int(m[1]) for p in everyone for _, m in p.grep(re.compile(r"training stops at step (\d+)"))]
    rss = [float(m[1]) for p in everyone for _, m in p.grep(re.compile(r"peak memory: ([0-9.]+) MiB"))]
    held = [[int(x) for x in m.groups()] for p in peers for _, m in p.grep(HELD)[-1:]]
    sent, recv = rates(before, after, "OutDatagrams"), rates(before, after, "InDatagrams")
    drops = sum(a[1]["RcvbufErrors"] - b[1]["RcvbufErrors"] for b, a in zip(before, after))
    shutdown_by_host = [f[1]["OutDatagrams"] - a[1]["OutDatagrams"] for a, f in zip(at_stop, final)]
    shutdown = sum(shutdown_by_host)
    row = {
        "peers": n, "target": target, "window_s": w1 - w0, "first_avg_s": first_avg,
        "all_averaged_s": max((p.grep(AVG)[0][0] for p in peers if p.grep(AVG)), default=None),
        "never_averaged": [p.i for p in peers if not p.grep(AVG)],
        "rounds": len(rounds_seen), "swarm_samples_per_s": swarm_samples / (w1 - w0), "samples_median": med(samples),
        "samples_min": min(samples, default=None),
        "samples_max": max(samples, default=None), "rounds_in_range": sum(in_range),
        "first_meeting_share": med(list(first_meet.values())),
        "topped_up_epochs": len(first_meet), "rounds_capped": sum(1 for g in rounds_seen if g[3]),
        "epoch_target_ratio": med(epoch_ratio), "epoch_target_ratio_min": min(epoch_ratio, default=None),
        "epoch_target_ratio_max": max(epoch_ratio, default=None), "epochs_judged": len(inner),
        "cohorts_per_epoch": med([len(cohorts[e]) for e in inner]),
        "group_sizes": dict(collections.Counter(k for _, k, _, _ in rounds_seen)),
        "matchmaking_ms": med(mm), "round_ms": med(rounds), "epoch_s": med(epoch_s), "barrier_share": med(shares),
        # How much of the machine's CPU time the window left idle: on a
        # machine the peers share, a peer that waits hands its CPU to the
        # others, so the swarm lost at most this much compute to waits.
        "cpu_idle_share": (cpu1[0] - cpu0[0]) / max(1, cpu1[1] - cpu0[1]),
        # Where a peer's CPU went (its threads by name), for peers alive all
        # through the window: ms of CPU a second per peer.
        "thread_cpu_ms_s": thread_cpu(threads0, threads1, max(1e-3, w1 - w0)),
        "sent_per_s": med(sent), "sent_per_s_max": max(sent), "sent_per_s_by_peer": [round(x) for x in sent], "recv_per_s": med(recv), "recv_per_s_max": max(recv),
        "sent_kb_s": med(rates(before, after, "o_bytes")) / 1000,
        "recv_kb_s": med(rates(before, after, "i_bytes")) / 1000,
        "drops": drops, "drops_per_s": drops / (w1 - w0),
        "drops_by_peer": [a[1]["RcvbufErrors"] - b[1]["RcvbufErrors"] for b, a in zip(before, after)],
        "progress_reads_per_s": med(per_s(1)), "dht_reads_per_s": med(per_s(3)), "table_reads_per_s": med(per_s(4)),
        "table_kb_s": med(per_s(6)) / 1000 if reads else None,
        "requests_per_s": {k: req_s(i) for i, k in enumerate(["gets", "listens", "puts", "finds", "pings", "watches"], 2)},
        "rss_mib": med(rss), "rss_mib_max": max(rss, default=None), "epochs_min": min(last, default=None),
        "epochs_max": max(last, default=None), "shutdown_datagrams": shutdown, "shutdown_s": shutdown_s,
        "shutdown_by_host": shutdown_by_host, "exit_s": [round(exits[k], 2) for k in range(len(peers))],
        "dissect_stop": dissected_stop, "dissect_stop_host": hs[0].name if dissected_stop else None,
        "dissect_host": hs[-1].name if dissected else None, "dissect_s": args.seconds, "dissect": dissected,
        "dht_held": held,  # [searches, nodes listed, silent] of each peer at the stop
        "logs": folder, "churn": churn.judge(w1) if churn else None,
    }
    with open(os.path.join(out, "results.json"), "a") as f:
        f.write(json.dumps(row) + "\n")
    return row


HEAD = (f"{'peers':>5} {'1st avg s':>9} {'target':>7} {'samples/round med [min..max]':>29} {'in range':>8} "
        f"{'mm ms':>7} {'round ms':>8} {'epoch s':>7} {'barrier':>7} {'UDP out/s':>9} {'in/s':>6} "
        f"{'out kB/s':>8} {'in kB/s':>7} {'drops/s':>7} {'RSS MiB':>7} {'epochs':>9} {'kS/s':>6}")


def show(r):
    span = f"{r['samples_median']:.0f} [{r['samples_min']}..{r['samples_max']}]" if r["rounds"] else "none"
    return (f"{r['peers']:>5} {r['first_avg_s']:>9.1f} {r['target']:>7} {span:>29} "
            f"{r['rounds_in_range']:>3}/{r['rounds']:<4} {r['matchmaking_ms']:>7.1f} {r['round_ms']:>8.1f} "
            f"{r['epoch_s']:>7.2f} {100 * r['barrier_share']:>6.1f}% {r['sent_per_s']:>9.0f} {r['recv_per_s']:>6.0f} "
            f"{r['sent_kb_s']:>8.1f} {r['recv_kb_s']:>7.1f} {r['drops_per_s']:>7.1f} {r['rss_mib']:>7.1f} "
            f"{str(r['epochs_min']) + '..' + str(r['epochs_max']):>9} {r['swarm_samples_per_s'] / 1000:>6.0f}")


def verdicts(r):
    """Issue 16's targets at 64 peers, judged at this size."""
    ok = lambda b: "PASS" if b else "FAIL"  # noqa: E731
    return [
        f"samples per round in [target, target + {BATCH} x members] (a bounded group: its share of them): "
        f"{ok(r['rounds'] and r['rounds_in_range'] == r['rounds'])} ({r['rounds_in_range']}/{r['rounds']} rounds)",
        f"DHT datagrams <= 200 per peer per second, sent and received, worst peer: "
        f"{ok(max(r['sent_per_s_max'], r['recv_per_s_max']) <= 200)} "
        f"(sent {r['sent_per_s_max']:.0f}, received {r['recv_per_s_max']:.0f})",
        f"no receive-buffer drops: {ok(r['drops'] == 0)} ({r['drops']} in {r['window_s']:.0f} s)",
        f"epochs at the target swarm-wide (every group's samples at an epoch, median of the window's whole epochs, "
        f"in [0.9, 1.5] x target): {ok(r['epochs_judged'] and 0.9 <= r['epoch_target_ratio'] <= 1.5)} "
        f"({r['epoch_target_ratio'] or 0:.2f} x, range {r['epoch_target_ratio_min'] or 0:.2f}..{r['epoch_target_ratio_max'] or 0:.2f}, "
        f"{r['epochs_judged']} epochs, median {r['cohorts_per_epoch'] or 0} attempts' cohorts an epoch)",
        f"barrier wait <= 10% of an epoch (median): {ok(r['barrier_share'] <= 0.10)} "
        f"({100 * r['barrier_share']:.1f}% of {r['epoch_s']:.2f} s)",
    ] + churn_verdicts(r["churn"], ok)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--peers", default="4,16,64", help="swarm sizes, run one after the other")
    ap.add_argument("--seconds", type=float, default=120, help="measured window per size, after the first average")
    ap.add_argument("--warmup", type=float, default=5, help="seconds between the first average and the window")
    ap.add_argument("--threads", type=int, default=1, help="trainer.threads (and OMP_NUM_THREADS) per peer")
    ap.add_argument("--target", type=int, default=1 << 20,
                    help="target_batch_size, the same at every size: the CPUs bound the swarm's rate, so epochs\n"
                         "last about as long at each size (1-2 s on 2 cores)")
    ap.add_argument("--initial-peers", type=int, default=1,
                    help="initial peers each joiner is given: the first peer and this many - 1 earlier ones")
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE for every peer's loom train (repeatable)")
    ap.add_argument("--churn", type=float, default=0,
                    help="fraction of the swarm SIGKILLed and restarted per minute in the window (issue 16: 0.25)")
    ap.add_argument("--churn-down", type=float, default=2, help="seconds a killed peer stays down before its restart")
    ap.add_argument("--dissect", action="store_true", help="count one host's DHT queries by method and key, in the window and in the shutdown")
    ap.add_argument("--loom", default=os.environ.get("LOOM_BIN", os.path.join(ROOT, "build", "bin", "loom")))
    ap.add_argument("--out", default="", help="folder for logs and results.json (default: a new one, kept)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.peers.split(",")]
    if min(sizes) < 2:
        ap.error("a swarm has at least 2 peers")
    if args.churn < 0 or args.churn_down < 0:
        ap.error("--churn and --churn-down are >= 0")
    reason = netns_hosts.skip_reason()
    if reason:
        sys.exit(f"swarm_scale: emulated hosts cannot be made here: {reason}")
    if not os.access(args.loom, os.X_OK):
        sys.exit(f"swarm_scale: {args.loom} is not an executable (build first, or --loom)")
    out = args.out or tempfile.mkdtemp(prefix="loom-swarm-scale-")
    os.makedirs(out, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # leaves the with blocks: hosts removed
    print(f"swarm_scale: logs and results.json in {out}; no netem here (no latency or loss: LAN-only figures)")
    rows = []
    for k, n in enumerate(sizes):
        began = time.monotonic()
        print(f"== {n} peers: {args.seconds:.0f} s measured", flush=True)
        try:
            rows.append(run_size(n, args, out, k))
        except (PeerFailed, netns_hosts.HostsError) as e:
            report(rows)
            print(f"swarm_scale: FAILED at {n} peers: {e}", file=sys.stderr)
            sys.exit(1)
        r = rows[-1]
        print(f"  took {time.monotonic() - began:.0f} s; every peer averaged by {r['all_averaged_s']:.1f} s; "
              f"groups of {r['group_sizes']}; shutdown: {r['shutdown_datagrams']} datagrams sent in "
              f"{r['shutdown_s']:.1f} s; {r['topped_up_epochs']} epochs met short of the target first, "
              f"at {100 * r['first_meeting_share']:.0f}% of it (median), and were topped up; "
              f"{r['rounds_capped']} rounds' targets capped by their groups' part of the swarm; "
              f"RSS max {r['rss_mib_max']} MiB; UDP sent/s worst peer {r['sent_per_s_max']:.0f} (peer "
              f"{r['sent_per_s_by_peer'].index(round(r['sent_per_s_max']))}, the first being the seed)", flush=True)
        print(f"  the machine's CPUs were idle {100 * r['cpu_idle_share']:.1f}% of the window (the peers' waits "
              f"left at most that much of the swarm's compute unused); CPU per peer by thread, ms a second: " +
              ", ".join(f"{k} {v:.1f}" for k, v in r["thread_cpu_ms_s"].items() if v >= 0.05), flush=True)
        if r["table_kb_s"] is not None:
            print(f"  progress reads per peer per second (medians, whole run): {r['progress_reads_per_s']:.2f}, "
                  f"{r['dht_reads_per_s']:.2f} of them DHT reads, {r['table_reads_per_s']:.2f} peers' tables over TCP "
                  f"({r['table_kb_s']:.1f} kB/s received)", flush=True)
        if r["requests_per_s"]["gets"] is not None:
            q = r["requests_per_s"]
            print("  DHT requests sent per peer per second (medians, whole run): " +
                  ", ".join(f"{q[k]:.1f} {k}" for k in ["gets", "listens", "puts", "finds", "pings"]) +
                  f"; {q['watches']:.2f} watches begun", flush=True)
        if r["dht_held"]:
            col = lambda i: [h[i] for h in r["dht_held"]]  # noqa: E731
            print(f"  the DHT nodes held at the stop ({len(r['dht_held'])} teardowns; median, most): searches "
                  f"{med(col(0)):.0f}, {max(col(0))}; nodes listed in them {med(col(1)):.0f}, {max(col(1))}; "
                  f"of those silent {med(col(2)):.0f}, {max(col(2))}", flush=True)
        if r["churn"]:
            c = r["churn"]
            print(f"  churn: {c['kills']} peers SIGKILLed and {c['restarts']} restarted; of those restarted, "
                  f"{c['restart_loaded']} loaded the state (median {c['restart_load_s']:.1f} s after their start) and "
                  f"{c['restart_averaged']} averaged again (median {c['restart_avg_s']:.1f} s); epoch spread of the "
                  f"peers settled (a restarted one after a minute), every 10 s: {[s for _, s, _ in c['epoch_spreads']]}; "
                  f"{c['long_lived']} peers never killed, over {c['usage_span_s']:.0f} s: descriptors "
                  f"{c['fd_growth_med']:+.1f} median, {c['fd_growth_max']:+.1f} worst; RSS "
                  f"{c['rss_growth_mib_med']:+.1f} MiB median, {c['rss_growth_mib_max']:+.1f} worst", flush=True)
            print(f"  restarts (start in the window s, loaded after s, averaged after s, up s): {c['restart_lives']}")
            if c["stalls"]:
                print(f"  minutes without an epoch (peer, life, minute's start in s): {c['stalls']}")
        if r["drops"]:
            print(f"  receive-buffer drops by peer: {r['drops_by_peer']}")
        if r["never_averaged"]:
            print(f"  peers that never averaged: {r['never_averaged']}")
        if r["dissect"]:
            span = r["dissect_s"]
            print(f"  DHT datagrams per second on host {r['dissect_host']}, by OpenDHT method and key:")
            for what, (count, size) in sorted(r["dissect"].items(), key=lambda kv: -kv[1][0])[:16]:
                print(f"    {count / span:8.1f}/s {size / span / 1000:8.1f} kB/s  {what}")
        by, ex = r["shutdown_by_host"], r["exit_s"]
        print(f"  shutdown: datagrams sent per host median {med(by):.0f}, most {max(by)}; peers exited after "
              f"{min(ex):.1f} s (first), {med(ex):.1f} s (median), {max(ex):.1f} s (last)")
        if r["dissect_stop"] is not None:
            d = r["dissect_stop"]
            print(f"  shutdown on host {r['dissect_stop_host']}, {SHUTDOWN_SNIFF_S} s from the counters' reading before "
                  f"the first SIGTERM "
                  f"({sum(c for c, _ in d.values())} datagrams), by OpenDHT method and key:")
            for what, (count, size) in sorted(d.items(), key=lambda kv: -kv[1][0])[:16]:
                print(f"    {count:8d} {size / 1000:8.1f} kB  {what}")
    report(rows)


def report(rows):
    if not rows:
        return
    print("\n" + HEAD)
    for r in rows:
        print(show(r))
    print("\nissue 16's targets at 64 peers (judged at each size):")
    for r in rows:
        for v in verdicts(r):
            print(f"  {r['peers']:>3} peers: {v}")
    print("mm: median matchmaking wait of the training thread; barrier: median of that wait over its epoch's length "
          "(round line to round line); UDP: medians over peers; epochs: lowest..highest at the stop; "
          "kS/s: the swarm's averaged samples per second")


if __name__ == "__main__":
    main()
