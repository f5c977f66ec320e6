# SPDX-License-Identifier: Apache-2.0
"""A tiny TCP server and client that test_hosts.py runs inside emulated hosts.

  tcp_tool.py serve ADDRESS
      listens on ADDRESS and a free port, prints "port N", then serves
      connections one after another, until killed. A client sends one line
      "UP DOWN", then UP bytes; the server reads them, answers a line with
      the client's address as it sees it, then DOWN bytes, and closes.
  tcp_tool.py xfer HOST PORT UP DOWN [CONNECT_TIMEOUT]
      does the client's part and prints JSON: seen_as (the server's view of
      this client), bytes, seconds (connect to the last byte), mbit_s; or
      {"error": ...} and exits 1 when it cannot connect.
"""
import json
import socket
import sys
import time

CHUNK = 1 << 16


def serve(address):
    server = socket.create_server((address, 0))
    print("port", server.getsockname()[1], flush=True)
    zeros = bytes(CHUNK)
    while True:
        conn, (peer, _) = server.accept()
        with conn, conn.makefile("rb") as reader:
            try:
                up, down = (int(x) for x in reader.readline().split())
                while up > 0:
                    got = reader.read(min(up, CHUNK))
                    if not got:
                        break
                    up -= len(got)
                conn.sendall(f"{peer}\n".encode())
                while down > 0:
                    conn.sendall(zeros[:min(down, CHUNK)])
                    down -= min(down, CHUNK)
            except (OSError, ValueError) as e:
                print("connection from", peer, "failed:", e, flush=True)


def xfer(host, port, up, down, connect_timeout=5.0):
    start = time.monotonic()
    try:
        conn = socket.create_connection((host, port), timeout=connect_timeout)
    except OSError as e:
        print(json.dumps({"error": f"{type(e).__name__}: {e}", "seconds": time.monotonic() - start}))
        return 1
    conn.settimeout(120)
    zeros = bytes(CHUNK)
    with conn, conn.makefile("rb") as reader:
        conn.sendall(f"{up} {down}\n".encode())
        left = up
        while left > 0:
            conn.sendall(zeros[:min(left, CHUNK)])
            left -= min(left, CHUNK)
        seen_as = reader.readline().decode().strip()
        received = 0
        while chunk := reader.read(CHUNK):
            received += len(chunk)
    seconds = time.monotonic() - start
    total = up + received
    print(json.dumps({"seen_as": seen_as, "bytes": total, "received": received, "seconds": seconds,
                      "mbit_s": total * 8 / seconds / 1e6}))
    return 0 if received == down else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"] and len(sys.argv) == 3:
        serve(sys.argv[2])
    elif sys.argv[1:2] == ["xfer"] and len(sys.argv) in (6, 7):
        sys.exit(xfer(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]),
                      *(float(a) for a in sys.argv[6:])))
    else:
        sys.exit(__doc__)
