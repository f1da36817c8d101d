#!/usr/bin/env python3
"""The `rsh` that MPICH's hydra uses between the two guests of `scripts/rdma_guest.py run
--hosts 2`, which have no ssh: one guest serves, the other's mpiexec starts its proxy there.

    guest_rsh.py serve [--port P] [--wait S]  # on rchost1: run the one command it is sent, exit with its status
    mpiexec -launcher rsh -launcher-exec scripts/guest_rsh.py -hosts 10.9.0.1:2,10.9.0.2:2 ...
                                              # on rchost0: hydra runs `guest_rsh.py HOST CMD...`

The client sends the command line (hydra quotes it for a remote shell, as for ssh), the
server runs it with `sh -c`, sends its output back, then a NUL and the exit status. Only
the standard library: it runs under the guest's system Python, which starts in a second
under emulation where importing torch for torchrun takes 25 s per process."""

import socket
import subprocess
import sys
import time

PORT = 29518


def serve(port: int, wait_s: float) -> int:
    """Accept one connection, run its command, report its status; exit with it."""
    with socket.create_server(("", port)) as srv:
        srv.settimeout(wait_s)
        conn, _ = srv.accept()
    with conn:
        conn.settimeout(None)
        line = b""
        while not line.endswith(b"\n"):
            chunk = conn.recv(65536)
            if not chunk:
                return 2
            line += chunk
        proc = subprocess.Popen(
            ["sh", "-c", line.decode()], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        for chunk in iter(lambda: proc.stdout.read1(65536), b""):
            conn.sendall(chunk)
        status = proc.wait()
        conn.sendall(b"\0" + str(status).encode())
    return status


def client(host: str, command: list[str], port: int, connect_s: float = 120) -> int:
    """Run `command` on `host` (whose server may still be starting): its status, or 255
    (ssh's) when it could not be reached."""
    deadline = time.monotonic() + connect_s
    while True:
        try:
            conn = socket.create_connection((host, port), timeout=5)
            break
        except OSError as e:
            if time.monotonic() > deadline:
                print(f"guest_rsh: cannot reach {host}:{port}: {e}", file=sys.stderr)
                return 255
            time.sleep(0.2)
    with conn:
        conn.settimeout(None)
        conn.sendall(" ".join(command).encode() + b"\n")
        got = b""
        while chunk := conn.recv(65536):
            got += chunk
    out, sep, status = got.rpartition(b"\0")
    sys.stdout.buffer.write(out)
    return int(status) if sep and status.isdigit() else 255


def main(argv: list[str]) -> int:
    if argv[:1] == ["serve"]:
        port = int(argv[argv.index("--port") + 1]) if "--port" in argv else PORT
        wait_s = float(argv[argv.index("--wait") + 1]) if "--wait" in argv else 300.0
        return serve(port, wait_s)
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    return client(argv[0], argv[1:], PORT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
