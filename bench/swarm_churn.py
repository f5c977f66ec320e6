# SPDX-License-Identifier: Apache-2.0
"""Churn for bench/swarm_scale.py (--churn F): one peer at a time SIGKILLed
at even spacing, F x n a minute, never the seed (peer 0, every joiner's
initial peer), and restarted on its host --churn-down s later as a joiner;
a peer that dies on its own is noted and restarted too. Then issue 16's
churn verdicts: no stall, no partition, nothing leaked."""
import os
import random
import re
import signal
import statistics
import subprocess
import time

EPOCH = re.compile(r"\] (?:\[strategy 'collab'\] )?(?:epoch (\d+):|matchmaking at epoch (\d+) )")
LOADED = re.compile(r"loaded the state of epoch (\d+)")


def loom_pid(peer):
    """loom's own pid (the child of nsenter), or None once it is gone."""
    try:
        with open(f"/proc/{peer.proc.pid}/task/{peer.proc.pid}/children") as f:
            return int(f.read().split()[0])
    except (OSError, IndexError, ValueError):
        return None


def epoch_at(peer, t):
    """The last epoch the peer's log named by time t (-1: none yet)."""
    e = -1
    for when, text in list(peer.lines):
        if when > t:
            break
        m = EPOCH.search(text)
        if m:
            e = int(m[1] or m[2])
    return e


def med(xs):
    return statistics.median(xs) if xs else float("nan")


class Churn:
    """--churn: SIGKILLs one peer at a time (never the seed, peer 0) at even
    spacing, F x n a minute, and restarts it on its host --churn-down s later;
    samples descriptors and RSS of the peers never killed every 10 s."""

    def __init__(self, args, peers, hosts, start, t0, w0, port, averaged, fail):
        """start(i, join, life) starts peer i's next life; averaged: the
        regex of an averaged round's line; fail(peer, why) raises."""
        self.args, self.peers, self.hosts, self.start, self.t0, self.w0 = args, peers, hosts, start, t0, w0
        self.port, self.averaged, self.fail = port, averaged, fail
        self.every = 60.0 / (args.churn * len(peers))
        self.next_kill = w0 + self.every / 2
        self.down = {}  # slot -> time it may restart
        self.gone, self.kills, self.lives, self.crashes = [], [], {}, []
        self.pick = random.Random(len(peers))
        self.usage = {}  # slot -> [(t, fds, rss KiB)] for peers never killed
        self.next_sample, self.sampled = w0, False

    def now(self):
        return time.monotonic() - self.t0

    def tick(self):
        t = self.now()
        if t >= self.next_sample:
            self.sample(t)
            self.next_sample += 10
        if t >= self.next_kill:
            self.next_kill += self.every
            up = [i for i, p in enumerate(self.peers) if p and i != 0]
            if up:
                self.kill(self.pick.choice(up), t)
        for i, when in list(self.down.items()):
            if t >= when:
                del self.down[i]
                live = [j for j, p in enumerate(self.peers) if p and j != 0 and j != i]
                seeds = [0] + self.pick.sample(live, min(1, len(live)))
                self.lives[i] = self.lives.get(i, 0) + 1
                self.peers[i] = self.start(i, ",".join(f"{self.hosts[j].address}:{self.port}" for j in seeds),
                                           self.lives[i])

    def reap(self):
        """Peers that died on their own: noted (status, the end of the log)
        and restarted like a killed one."""
        t = self.now()
        for i, p in enumerate(self.peers):
            if p and p.proc.poll() is not None:
                p.thread.join(timeout=5)
                p.killed_at = t
                self.crashes.append({"peer": i, "life": p.life, "status": p.proc.returncode, "at_s": round(t - self.w0),
                                     "log": p.log_path, "tail": [text for _, text in p.lines[-40:]]})
                print(f"  peer {i} (life {p.life}) died on its own with status {p.proc.returncode} at "
                      f"{t - self.w0:.0f} s of the window; log {p.log_path}", flush=True)
                self.peers[i] = None
                self.gone.append(p)
                self.usage.pop(i, None)
                self.down[i] = t + self.args.churn_down

    def kill(self, i, t):
        p = self.peers[i]
        pid = loom_pid(p)
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            p.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            # loom not found as nsenter's child (or stuck): nsenter's whole
            # process group goes, and the run goes on; said, not hidden.
            print(f"  churn: peer {i} (pid {pid}) did not end within 30 s of SIGKILL; killing its nsenter "
                  f"{p.proc.pid} too", flush=True)
            try:
                os.killpg(p.proc.pid, signal.SIGKILL)
            except OSError:
                p.proc.kill()
            try:
                p.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.fail(p, "did not end within 30 s of SIGKILL, nor 30 s after its nsenter's")
        p.killed_at = t
        self.peers[i] = None
        self.gone.append(p)
        self.kills.append((t, i))
        self.usage.pop(i, None)  # a long-lived peer is one never killed
        self.down[i] = t + self.args.churn_down

    def sample(self, t):
        for i, p in enumerate(self.peers):
            if not p or p.life or (self.sampled and i not in self.usage):
                continue
            pid = loom_pid(p)
            try:
                fds = len(os.listdir(f"/proc/{pid}/fd"))
                with open(f"/proc/{pid}/status") as f:
                    rss = int(re.search(r"VmRSS:\s+(\d+)", f.read())[1])
            except (OSError, TypeError):
                continue
            self.usage.setdefault(i, []).append((t, fds, rss))
        self.sampled = True

    def finish(self):
        """Samples usage once more; every slot still down stays down. A
        restart too fresh to have said anything is given up to 30 s: a
        SIGTERM before loom catches signals ends it with the signal."""
        until = time.monotonic() + 30
        while time.monotonic() < until and any(p and p.life and not p.lines for p in self.peers):
            time.sleep(0.2)
        self.reap()
        self.sample(self.now())
        self.peers[:] = [p for p in self.peers if p]

    def judge(self, w1):
        """The churn figures and issue 16's three verdicts."""
        everyone = self.peers + self.gone
        up = lambda p, a, b: p.started <= a and getattr(p, "killed_at", float("inf")) >= b  # noqa: E731
        # A peer counts for the partition once it has had a minute to rejoin
        # (those of the first start, from the start).
        settled = lambda p, t: up(p, t - 60 if p.life else 0, t)  # noqa: E731
        stalls, checked = [], 0
        m = self.w0
        while m + 60 <= w1 + 1:
            for p in everyone:
                if up(p, m, m + 60):
                    checked += 1
                    if epoch_at(p, m + 60) <= epoch_at(p, m):
                        stalls.append((p.i, p.life, round(m - self.w0)))
            m += 60
        spreads = []
        t = self.w0 + 10
        while t <= w1:
            es = [epoch_at(p, t) for p in everyone if settled(p, t)]
            es = [e for e in es if e >= 0]
            if es:
                spreads.append((round(t - self.w0), max(es) - min(es), len(es)))
            t += 10
        # Descriptors and RSS swing with the rounds (a group's connections
        # come and go): the first minute's samples against the last minute's.
        # Descriptors by their floor: a leak raises it, while a round's or a
        # state transfer's sockets open at one sample and not the next (a
        # 6-peer loopback run with a kill every 8 s swung 5 to 8 sockets and
        # ended where it began; medians of three samples read that as +5).
        def growth(u):
            first = [x for x in u if x[0] - u[0][0] < 60] or u[:1]
            last = [x for x in u if u[-1][0] - x[0] < 60] or u[-1:]
            return (min(x[1] for x in last) - min(x[1] for x in first),
                    (med([x[2] for x in last]) - med([x[2] for x in first])) / 1024)
        grow = [growth(u) for u in self.usage.values() if len(u) >= 2 and u[-1][0] - u[0][0] >= 120]
        restarted = [p for p in everyone if p.life]
        loads = [p.grep(LOADED)[0][0] - p.started for p in restarted if p.grep(LOADED)]
        avgs = [p.grep(self.averaged)[0][0] - p.started for p in restarted if p.grep(self.averaged)]
        worst = max((s for _, s, _ in spreads), default=None)
        # Each restart: (its start in the window, s to its load, s to its
        # first average, s it was up), None for what did not happen.
        first = lambda p, pat: round(p.grep(pat)[0][0] - p.started, 1) if p.grep(pat) else None  # noqa: E731
        lives = [(round(p.started - self.w0), first(p, LOADED), first(p, self.averaged),
                  round(min(getattr(p, "killed_at", w1), w1) - p.started)) for p in restarted]
        return {
            "kills": len(self.kills), "restarts": len(restarted), "crashes": self.crashes, "minutes_checked": checked, "stalls": stalls,
            "epoch_spread_max": worst, "epoch_spreads": spreads,
            "restart_load_s": med(loads), "restart_loaded": len(loads), "restart_avg_s": med(avgs),
            "restart_averaged": len(avgs), "restart_lives": sorted(lives, key=lambda x: x[0]),
            "fd_growth_max": max((g[0] for g in grow), default=float("nan")), "fd_growth_med": med([g[0] for g in grow]),
            "rss_growth_mib_max": max((g[1] for g in grow), default=float("nan")),
            "rss_growth_mib_med": med([g[1] for g in grow]), "long_lived": len(grow),
            "usage_span_s": med([u[-1][0] - u[0][0] for u in self.usage.values() if len(u) >= 2]),
        }


def churn_verdicts(c, ok):
    if not c:
        return []
    return [
        f"churn, no peer died on its own: {ok(not c['crashes'])} "
        f"({[(x['peer'], x['status'], x['at_s']) for x in c['crashes']]}: peer, status, s into the window)",
        f"churn, no stall (every peer up for a whole minute advanced an epoch in it): {ok(c['minutes_checked'] and not c['stalls'])} "
        f"({len(c['stalls'])} of {c['minutes_checked']} peer-minutes without one)",
        f"churn, no partition (settled peers within 2 epochs, every 10 s): "
        f"{ok(c['epoch_spread_max'] is not None and c['epoch_spread_max'] <= 2)} (widest {c['epoch_spread_max']})",
        f"churn, nothing leaked (peers never killed, first and last minute: descriptors' floor +<= 2, RSS median +<= 16 MiB): "
        f"{ok(c['long_lived'] and c['fd_growth_max'] <= 2 and c['rss_growth_mib_max'] <= 16)} "
        f"({c['fd_growth_max']:+.1f} descriptors, {c['rss_growth_mib_max']:+.1f} MiB worst, {c['long_lived']} peers)",
    ]
