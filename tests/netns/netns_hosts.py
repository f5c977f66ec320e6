# SPDX-License-Identifier: Apache-2.0
"""Emulated hosts for tests: one set of Linux namespaces per host, on a bridge.

Each host has its own network, UTS (hostname), IPC, PID and mount namespaces,
its own /dev/shm, boot_id and machine-id. Without them, processes of two
"hosts" share one kernel's identity, and whatever asks "is that peer on my
machine?" (UCX's shared-memory and CMA transports: boot_id, IPC and PID
namespaces; Loom ucx's cross-memory attach: boot_id, PID namespace) says yes
and moves data through memory, never through the network. The rest of the
filesystem is shared, as over NFS; one /etc/hosts names every host.

A switch namespace holds the bridge br0 (10.77.0.0/16). A public host's eth0
is a veth pair whose other end is a bridge port. A NAT'd host has
192.168.K.2/24 behind its own router namespace, whose wan end is on the
bridge: the router masquerades what goes out and, like a home router, drops
every connection that comes in (nftables). Nothing is made in the caller's
network namespace. rate_mbit limits both directions of a host's link (tbf).
This kernel has no netem: latency, jitter and loss cannot be emulated, every
link is a sub-millisecond LAN. Say so wherever a figure depends on it.

Namespaces are named {prefix}-{pid}-{start}-{n}-{role} (role sw, h-NAME or
r-NAME): the creator's pid and start time tell a later Hosts() the leftovers
of a dead run, which it removes, from those of a live one. Interface names
(eth0, wan, lan, pN) live only inside these namespaces.
Needs root, iproute2, util-linux, mount and nftables (see skip_reason()).
"""
import functools
import glob
import itertools
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
import weakref

_SEARCH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/bin", "/sbin", "/bin"])
_PACKAGES = {"ip": "iproute2", "tc": "iproute2", "nft": "nftables", "unshare": "util-linux",
             "nsenter": "util-linux", "mount": "mount"}
_serial = itertools.count()

# The router: masquerade out of wan, forward only what the inside started,
# and accept nothing new from wan on the router itself either.
_NAT_RULES = """
table ip loom_nat {
  chain post { type nat hook postrouting priority srcnat; oifname "wan" masquerade; }
}
table inet loom_fw {
  chain forward { type filter hook forward priority filter; policy drop;
                  ct state established,related accept; iifname "lan" oifname "wan" accept; }
  chain input { type filter hook input priority filter;
                iifname "wan" ct state established,related accept; iifname "wan" drop; }
}
"""

# Run as PID 1 of the host's PID namespace (unshare --fork), it gives the
# host its name and private files, says "ready", and holds the namespaces
# that Host.popen enters.
_ANCHOR = """set -e
hostname "$1"
mount -t tmpfs -o "size=$2,mode=1777" tmpfs /dev/shm
mount --bind "$3" /proc/sys/kernel/random/boot_id
if [ -e /etc/machine-id ]; then mount --bind "$4" /etc/machine-id; fi
mount --bind "$5" /etc/hosts
echo ready
exec sleep infinity
"""


class HostsError(RuntimeError):
    """A step of making, using or removing emulated hosts failed; the message names it."""


def _tool(name):
    path = shutil.which(name, path=_SEARCH)
    if path is None:
        raise HostsError(f"no `{name}` on PATH or in /usr/sbin, /sbin (Debian package {_PACKAGES[name]})")
    return path


def _cmd(argv, *, input=None, timeout=20, check=True):
    """Runs a short command of ours (ip, tc, nft) and returns its result.
    input: its standard input (ip -batch's commands, nft's rules)."""
    argv = [_tool(argv[0])] + [str(a) for a in argv[1:]]
    try:
        r = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise HostsError(f"`{' '.join(argv)}` did not finish within {timeout} s") from None
    if check and r.returncode != 0:
        given = f" with input {input!r}" if input else ""
        raise HostsError(f"`{' '.join(argv)}`{given} failed (exit {r.returncode}): {(r.stderr or r.stdout).strip()}")
    return r


def _ip(ns, *commands):
    """Runs ip commands (as written after `ip`) in network namespace ns, in one batch."""
    _cmd(["ip", "-n", ns, "-batch", "-"], input="".join(c + "\n" for c in commands))


def _start_time(pid):
    """A process's start time in ticks since boot (a string); None if it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # from field 3 (the name may hold anything)
    except OSError:
        return None
    return None if fields[0] in "ZX" else fields[19]


def running(pids):
    """Those of pids (a dict pid: start time) still running as that process."""
    return [pid for pid, start in pids.items() if start is not None and _start_time(pid) == start]


def _signal_group(proc, sig=signal.SIGKILL):
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass


def processes(ns):
    """pid: start time of every process whose network namespace is ns."""
    pids = [int(p) for p in _cmd(["ip", "netns", "pids", ns], check=False).stdout.split()]
    return {pid: _start_time(pid) for pid in pids}


def _empty_namespace(ns, killed, timeout=10):
    """SIGKILLs every process whose network namespace is ns, and those in
    killed (pid: start time), until none is left running: a process leaves
    its namespaces before it is done, and a PID namespace's init waits there
    for the end of the others."""
    deadline = time.monotonic() + timeout
    while True:
        found = processes(ns)
        killed.update(found)
        left = set(found) | set(running(killed))
        if not left:
            return
        if time.monotonic() > deadline:
            raise HostsError(f"processes {sorted(left)} of namespace {ns} survived SIGKILL for {timeout} s")
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)


def _remove_namespaces(names):
    """Kills every process in the namespaces, waits for their end, deletes
    the namespaces; returns what failed, as messages."""
    names, errors, killed = list(names), [], {}
    for ns in names:  # all of them before any dies, so that none is missed
        killed.update(processes(ns))
    for ns in names:
        try:
            _empty_namespace(ns, killed)
            deleted = _cmd(["ip", "netns", "delete", ns], check=False)
            if deleted.returncode != 0 and ns in _namespaces():  # else another run removed it first
                errors.append(f"`ip netns delete {ns}` failed: {deleted.stderr.strip()}")
        except HostsError as e:
            errors.append(str(e))
    return errors


def _namespaces():
    return [line.split()[0] for line in _cmd(["ip", "netns", "list"]).stdout.splitlines() if line.strip()]


def remove_stale(prefix):
    """Removes the namespaces, processes and scratch folders that Hosts of
    this prefix left when their creator died; returns the namespaces removed."""
    owner = re.compile(rf"^{re.escape(prefix)}-(\d+)-(\d+)-")

    def dead(name):
        m = owner.match(name)
        return m is not None and _start_time(int(m[1])) != m[2]

    stale = [n for n in _namespaces() if dead(n)]
    errors = _remove_namespaces(stale)
    for folder in glob.glob(os.path.join(tempfile.gettempdir(), prefix + "-*-*-")):
        if dead(os.path.basename(folder)):
            shutil.rmtree(folder, ignore_errors=True)
    if errors:
        raise HostsError("removing leftovers of a dead run: " + "; ".join(errors))
    return stale


class Host:
    """One emulated host. name is its hostname; address is the IPv4 address of
    its own eth0 (on the bridge when public, behind its router when NAT'd);
    public_address is where other hosts see its connections come from (its
    router's when NAT'd); netns is its network namespace's name."""

    def __init__(self, hosts, name, netns, address, public_address, nat, rate_mbit):
        self._hosts = hosts
        self.name, self.netns, self.address = name, netns, address
        self.public_address, self.nat, self.rate_mbit = public_address, nat, rate_mbit
        self.anchor_pid = None  # PID 1 of the host's PID namespace, in our numbering

    def __repr__(self):
        return f"Host({self.name!r}, {self.address}{' NAT' if self.nat else ''})"

    def popen(self, argv, env=None, log_path=None, cwd=None, **popen_args):
        """Starts argv on this host and returns its Popen, killed by Hosts.close()
        at the latest. env is added to this process's environment; with
        log_path, stdout and stderr go to that file. The child leads its own
        process group: signal it with Host.signal, which reaches the program
        (nsenter forks it and does not forward signals)."""
        argv = [_tool("nsenter"), f"--target={self.anchor_pid}", "--net", "--uts", "--ipc", "--mount", "--pid",
                f"--wd={cwd or os.getcwd()}", "--"] + [str(a) for a in argv]
        full_env = dict(os.environ)
        full_env.update(env or {})
        log = None
        if log_path is not None:
            log = open(log_path, "w")
            popen_args.update(stdout=log, stderr=subprocess.STDOUT)
        try:
            proc = subprocess.Popen(argv, env=full_env, start_new_session=True, **popen_args)
        except OSError as e:
            raise HostsError(f"starting {argv[9:]} on host {self.name}: {e}") from None
        finally:
            if log is not None:
                log.close()  # the child holds its own descriptor
        self._hosts._res.procs.append(proc)
        return proc

    def run(self, argv, timeout=30, env=None, input=None, check=True):
        """Runs a short command on this host and returns its CompletedProcess
        (text stdout and stderr). Raises HostsError if it outlives timeout
        (then it is killed) or, with check, if it exits non-zero."""
        proc = self.popen(argv, env=env, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            _signal_group(proc)
            out, err = proc.communicate(timeout=10)
            raise HostsError(f"{argv} on host {self.name} did not finish within {timeout} s; "
                             f"stdout: {out[-2000:]!r} stderr: {err[-2000:]!r}") from None
        if check and proc.returncode != 0:
            raise HostsError(f"{argv} on host {self.name} exited {proc.returncode}: {err.strip()[-2000:]}")
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)

    def signal(self, proc, sig):
        """Sends sig to a process this host's popen started (its whole group)."""
        _signal_group(proc, sig)


# The kernel keeps one ARP table for every network namespace, with
# machine-wide limits (net.ipv4.neigh.default.gc_thresh1-3, by default 128,
# 512 and 1,024 entries). Hosts on one bridge that all talk to each other
# need an entry per pair and direction: past gc_thresh3 the kernel refuses
# new ones ("neighbor table overflow"), and a host whose neighbours are
# refused reaches nobody. 64 hosts (about 4,000 entries) left 24 of 64 swarm
# peers unable to connect anywhere. The limits are raised as hosts are added
# (never lowered while another harness's switch may need them) and put back
# when the last harness on this machine closes.
_NEIGH = "/proc/sys/net/ipv4/neigh/default/gc_thresh{}"
_neigh_saved = {}  # which limit -> its value before any harness raised it


def _fit_neighbours(hosts):
    need = 4 * (hosts + 8) ** 2  # both directions, routers, and room for stale entries
    for which, want in ((2, need // 2), (3, need)):
        path = _NEIGH.format(which)
        try:
            with open(path) as f:
                now = int(f.read())
            if now < want:
                _neigh_saved.setdefault(which, now)
                with open(path, "w") as f:
                    f.write(str(want))
        except (OSError, ValueError):
            pass  # not root, or no such knob: a large harness may then lose connections


def _restore_neighbours(own_switch):
    others = [n for n in _namespaces() if n.endswith("-sw") and n != own_switch]
    if others or not _neigh_saved:
        return
    for which, value in sorted(_neigh_saved.items()):
        try:
            with open(_NEIGH.format(which), "w") as f:
                f.write(str(value))
        except OSError:
            pass
    _neigh_saved.clear()


class _Resources:
    """What a Hosts made, kept apart from it so that weakref.finalize can
    remove it when a Hosts is dropped or the interpreter exits unclosed."""

    def __init__(self, scratch):
        self.scratch, self.namespaces, self.procs = scratch, [], []

    def close(self):
        errors = _remove_namespaces(reversed(self.namespaces))
        for proc in self.procs:  # all were in the namespaces; this is a backstop
            _signal_group(proc)
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                errors.append(f"process {proc.pid} did not exit after SIGKILL: {proc.args}")
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        self.namespaces, self.procs = [], []
        shutil.rmtree(self.scratch, ignore_errors=True)
        if errors:
            raise HostsError("cleaning up emulated hosts: " + "; ".join(errors))


class Hosts:
    """A set of emulated hosts on one bridge; a context manager. Creating it
    first removes what dead earlier runs of the same prefix left behind.
    close() (or leaving the with block, also on an exception) kills every
    process in every namespace it made and deletes them, their links and
    the bridge."""

    def __init__(self, prefix="loomnet", shm_size="512m"):
        if not re.fullmatch(r"[a-z][a-z0-9]{0,15}", prefix):
            raise HostsError(f"prefix {prefix!r}: use 1-16 lowercase letters and digits, starting with a letter")
        remove_stale(prefix)
        self.base = f"{prefix}-{os.getpid()}-{_start_time(os.getpid())}-{next(_serial)}"
        self.shm_size = shm_size
        self.hosts = {}
        self._res = _Resources(os.path.join(tempfile.gettempdir(), self.base + "-"))
        self._finalizer = weakref.finalize(self, self._res.close)
        self._attached = self._natted = 0
        try:
            os.mkdir(self._res.scratch, 0o755)
            self._hosts_file = os.path.join(self._res.scratch, "hosts")
            self._write_hosts_file()
            self.switch = self._new_namespace("sw")
            _ip(self.switch, "link add br0 type bridge", "link set br0 up")
        except BaseException:
            self.close()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Kills every process of these hosts and deletes their namespaces
        (links and bridge go with them); raises HostsError naming anything left."""
        self._finalizer.detach()
        try:
            self._res.close()
        finally:
            _restore_neighbours(getattr(self, "switch", None))

    def namespaces(self):
        """The names of every network namespace made so far (hosts, routers, switch)."""
        return list(self._res.namespaces)

    def add_host(self, name, nat=False, rate_mbit=None):
        """Makes a host named name (also its hostname) and returns it. nat: it
        sits behind its own masquerading router and accepts nothing inbound.
        rate_mbit: both directions of its link are limited to that many Mbit/s."""
        if not re.fullmatch(r"[a-z][a-z0-9]{0,11}", name) or name in self.hosts:
            raise HostsError(f"host name {name!r}: use 1-12 lowercase letters and digits, unique in a Hosts")
        if rate_mbit is not None and not rate_mbit > 0:
            raise HostsError(f"host {name}: rate_mbit must be positive, not {rate_mbit!r}")
        ns = self._new_namespace("h-" + name)
        _fit_neighbours(len(self.hosts) + 1)
        if not nat:
            address, port = self._attach(ns, "eth0")
            host = Host(self, name, ns, address, address, False, rate_mbit)
            shaped = [(ns, "eth0"), (self.switch, port)]
        else:
            self._natted += 1
            if self._natted > 254:
                raise HostsError("at most 254 NAT'd hosts in one Hosts")
            inside = f"192.168.{self._natted}"
            router = self._new_namespace("r-" + name)
            public, _ = self._attach(router, "wan")
            _ip(ns, f"link add eth0 type veth peer name lan netns {router}", f"addr add {inside}.2/24 dev eth0",
                "link set eth0 up", f"route add default via {inside}.1")
            _ip(router, f"addr add {inside}.1/24 dev lan", "link set lan up")
            _cmd(["ip", "netns", "exec", router, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"])
            _cmd(["ip", "netns", "exec", router, "nft", "-f", "-"], input=_NAT_RULES)
            host = Host(self, name, ns, f"{inside}.2", public, True, rate_mbit)
            shaped = [(ns, "eth0"), (router, "lan")]
        if rate_mbit is not None:
            # The bucket holds 10 ms at the rate (at least 16 KB, more than a
            # 1500-byte frame); a queue beyond 100 ms is dropped, as a real link.
            burst = max(16384, int(rate_mbit * 1e6 / 8 / 100))
            for where, dev in shaped:  # egress of eth0 and of its peer: both directions
                _cmd(["tc", "-n", where, "qdisc", "replace", "dev", dev, "root", "tbf",
                      "rate", f"{rate_mbit}mbit", "burst", burst, "latency", "100ms"])
        self._start_anchor(host)
        self.hosts[name] = host
        self._write_hosts_file()
        return host

    def _new_namespace(self, role):
        ns = f"{self.base}-{role}"
        _cmd(["ip", "netns", "add", ns])
        self._res.namespaces.append(ns)
        _ip(ns, "link set lo up")
        return ns

    def _attach(self, ns, dev):
        """Joins ns to the bridge through a veth pair (dev in ns, pN on the
        bridge); returns dev's new address and the port's name."""
        self._attached += 1
        i = self._attached
        if i > 65000:
            raise HostsError("the bridge's /16 is full")
        address, port = f"10.77.{i >> 8}.{i & 255}", f"p{i}"
        # The default route makes dev's address the "outward" one (what a UDP
        # connect to any address picks) and lets a router forward.
        _ip(ns, f"link add {dev} type veth peer name {port} netns {self.switch}", f"addr add {address}/16 dev {dev}",
            f"link set {dev} up", f"route add default dev {dev}")
        _ip(self.switch, f"link set {port} master br0 up")
        return address, port

    def _write_hosts_file(self):
        # One file bind-mounted as every host's /etc/hosts, rewritten in place
        # (same inode) so that earlier hosts see later ones; names resolve
        # without DNS, which no namespace can reach.
        text = "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n"
        text += "".join(f"{h.address} {h.name}\n" for h in self.hosts.values())
        mode = "r+" if os.path.exists(self._hosts_file) else "w"
        with open(self._hosts_file, mode) as f:
            f.write(text)
            f.truncate()

    def _start_anchor(self, host):
        files = []
        for what, value in (("boot_id", str(uuid.uuid4())), ("machine-id", uuid.uuid4().hex)):
            files.append(os.path.join(self._res.scratch, f"{host.name}.{what}"))
            with open(files[-1], "w") as f:
                f.write(value + "\n")
        argv = [_tool("ip"), "netns", "exec", host.netns, _tool("unshare"), "--uts", "--ipc", "--pid", "--fork",
                "--mount-proc", "--propagation", "private", "--", "sh", "-c", _ANCHOR, "sh", host.name,
                self.shm_size, files[0], files[1], self._hosts_file]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
        self._res.procs.append(proc)
        ready = select.select([proc.stdout], [], [], 20)[0]
        line = proc.stdout.readline() if ready else ""
        if line.strip() != "ready":
            _signal_group(proc)
            why = (proc.stderr.read().strip() or f"exit {proc.wait(timeout=10)}") if ready else "no answer in 20 s"
            raise HostsError(f"host {host.name}: making its UTS, IPC, PID and mount namespaces failed "
                             f"({' '.join(argv[4:14])}): {why}")
        proc.stdout.close()
        proc.stderr.close()
        with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
            children = f.read().split()
        if len(children) != 1:
            raise HostsError(f"host {host.name}: unshare {proc.pid} has children {children}, expected one")
        host.anchor_pid = int(children[0])


@functools.cache
def skip_reason():
    """Why emulated hosts cannot be made here (a sentence), or None if they can."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth pairs, mounts); CI runs as root"
    missing = [tool for tool in _PACKAGES if shutil.which(tool, path=_SEARCH) is None]
    if missing:
        return f"no {', '.join(missing)} (apt-get install {' '.join(sorted({_PACKAGES[t] for t in missing}))})"
    try:
        with Hosts(prefix="loomprobe") as hosts:
            hosts.add_host("a")
            hosts.add_host("b", nat=True, rate_mbit=10).run(["true"], timeout=20)
    except (HostsError, OSError) as e:
        return f"emulated hosts cannot be made here: {e}"
    return None
