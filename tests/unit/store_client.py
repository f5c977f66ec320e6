#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""One fixed sequence of c10d store queries through PyTorch's own TCPStore
client (Debian's python3-torch), each result printed on a line of its own.

  store_client.py HOST PORT   against a server that listens there
  store_client.py --serve     against PyTorch's own server, started here

store_server_test.cpp runs both and compares the lines: Loom's store server
must answer every query exactly as c10d's does, the ones c10d's own
launcher never sends included (compare_set, delete_key, num_keys)."""
import datetime
import sys

import torch
from torch.distributed import TCPStore

# Since 2.4 TCPStore asks for its libuv backend by default, which Debian's
# build lacks (it then refuses to start); ask for the classic backend, the
# only one 1.13 has, where the argument exists.
_major, _minor = (int(v) for v in torch.__version__.split(".")[:2])
STORE_ARGS = {"use_libuv": False} if (_major, _minor) >= (2, 4) else {}


def attempt(what, call):
    try:
        print(what, repr(call()))
    except RuntimeError:  # c10d's timeout, whatever its wording
        print(what, "raised")


def main():
    timeout = datetime.timedelta(seconds=10)
    server = None
    if sys.argv[1:] == ["--serve"]:
        server = TCPStore("127.0.0.1", 0, 1, True, timeout=timeout, **STORE_ARGS)
        host, port = "127.0.0.1", server.port
    else:
        host, port = sys.argv[1], int(sys.argv[2])
    s = TCPStore(host, port, 1, False, timeout=timeout, **STORE_ARGS)
    s.set("a", "1")
    attempt("get a", lambda: s.get("a"))
    attempt("compare_set a 1->2", lambda: s.compare_set("a", "1", "2"))
    attempt("get a", lambda: s.get("a"))
    attempt("compare_set a wrong->3", lambda: s.compare_set("a", "wrong", "3"))
    attempt("compare_set new ''->fresh", lambda: s.compare_set("new", "", "fresh"))
    attempt("get new", lambda: s.get("new"))
    attempt("compare_set absent x->y", lambda: s.compare_set("absent", "x", "y"))
    attempt("num_keys", s.num_keys)
    attempt("delete a", lambda: s.delete_key("a"))
    attempt("delete a again", lambda: s.delete_key("a"))
    attempt("num_keys", s.num_keys)
    attempt("add n 5", lambda: s.add("n", 5))
    attempt("add n -7", lambda: s.add("n", -7))
    s.set("b", bytes(range(256)))
    attempt("get b", lambda: s.get("b") == bytes(range(256)))
    attempt("wait b new", lambda: s.wait(["b", "new"]))
    s.set_timeout(datetime.timedelta(milliseconds=300))
    attempt("wait never", lambda: s.wait(["never"]))
    attempt("get a (deleted)", lambda: s.get("a"))
    s.set_timeout(timeout)
    attempt("set after timeouts", lambda: s.set("c", "3"))
    attempt("get c", lambda: s.get("c"))
    del s, server


main()
