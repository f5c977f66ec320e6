# SPDX-License-Identifier: Apache-2.0
"""Helpers for the Python swarm tests: free ports, peers as real processes
(each ended when the test ends), their logs and results."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))


def _toml(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value)  # strings, and lists of strings: JSON's are TOML's


def torchscript_collab_config(path, *, scratch, out, run_id, epochs, lr=0.003, log_every=5, validation=False,
                              **options):
    """Writes a `loom train` config at path: the torchscript task on
    scratch/mlp.pt and scratch/train.pt (and scratch/val.pt with validation),
    AdamW with batch 32, as a verbose collab peer on loopback with target 256
    and the other strategy options given."""
    lines = ["[trainer]", 'task = "torchscript"', f"max_steps = {epochs}", "batch_size = 32", 'optimizer = "adamw"',
             f"lr = {lr}", "seed = 0", "threads = 1", f"log_every = {log_every}", f"output_dir = {_toml(out)}",
             "[task]", f"module = {_toml(scratch + '/mlp.pt')}", f"train = {_toml(scratch + '/train.pt')}",
             'inputs = ["x"]', 'loss = "cross_entropy"', 'target = "y"']
    if validation:
        lines.append(f"validation = {_toml(scratch + '/val.pt')}")
    lines += ["[strategy]", 'name = "collab"', "[strategy.options]", "target_batch_size = 256",
              f"run_id = {_toml(run_id)}", 'listen = "127.0.0.1"', "verbose = true"]
    lines += [f"{name} = {_toml(value)}" for name, value in options.items()]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


_ROUND = re.compile(r"epoch (\d+): round ([0-9.]+) ms from the group's meeting to the next window: "
                    r"gradients ([0-9.]+) ms, the host's optimizer step ([0-9.]+) ms, parameters ([0-9.]+) ms"
                    r"( \(averaged: [^)]*\))?")


def round_lines(log):
    """The collab plugin's verbose round lines in a peer's log: (epoch, round,
    gradients, optimizer step, parameters [ms], parameters averaged) each."""
    return [(int(m[1]), float(m[2]), float(m[3]), float(m[4]), float(m[5]), bool(m[6])) for m in _ROUND.finditer(log)]


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_id(tag):
    return f"py-{tag}-{uuid.uuid4().hex[:10]}"


class Process:
    """A child process with its output in a file; killed when closed."""

    def __init__(self, name, argv, scratch, env=None):
        self.name = name
        self.log_path = os.path.join(scratch, name + ".log")
        self._log = open(self.log_path, "w")
        full_env = dict(os.environ)
        full_env.update(env or {})
        full_env["PYTHONPATH"] = HERE + os.pathsep + full_env.get("PYTHONPATH", "")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, env=full_env,
                                     start_new_session=True)

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def tail(self, lines=40):
        return f"--- {self.name} ---\n" + "\n".join(self.log().splitlines()[-lines:])

    def wait(self, timeout):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self, sig=signal.SIGKILL):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass
            if sig == signal.SIGKILL:
                self.proc.wait(timeout=30)

    def close(self):
        self.kill()
        self._log.close()


def python_peer(name, scratch, args, env=None):
    out = os.path.join(scratch, name + ".json")
    argv = [sys.executable, os.path.join(HERE, "digits_peer.py"), "--out", out] + args
    p = Process(name, argv, scratch, env)
    p.out = out
    return p


def result(peer):
    with open(peer.out) as f:
        return json.load(f)


def wait_for(predicate, timeout, poll=0.1):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(poll)
    return False


class ScratchTest(unittest.TestCase):
    """A test with a scratch folder and the processes it started, all gone
    when it ends (passed or not)."""

    def setUp(self):
        self.scratch = tempfile.mkdtemp(prefix="loom-pytest-")
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            p.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def peer(self, name, args, env=None):
        """A digits_peer.py process, ended with the test."""
        p = python_peer(name, self.scratch, args, env)
        self.procs.append(p)
        return p

    def process(self, name, argv, env=None):
        p = Process(name, argv, self.scratch, env)
        self.procs.append(p)
        return p
