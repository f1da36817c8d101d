"""Strangers at the tcp listeners while rdmacoll.init() sets up (RDMACOLL_TRANSPORT=tcp).

Mode "strangers": when the ranks have exchanged their addresses and before any of them
connects, rank 0's process opens, against every rank's listener (its own included):
IDLE connections that never send a byte, GARBAGE ones that send random bytes, FORGED
ones that send a well-formed hello naming rank 0, read the listener's reply and answer
with a proof made without the secret, and one hello naming a device the listener is not
(WRONG_NONCE). Rank 1's address as rank 0 sees it points at a relay in rank 0's process,
which forwards rank 0's real handshake with rank 1 but first replays it: the hello and
the proof it recorded go to rank 1's listener on a second connection, which must be
refused (rank 1's challenge is fresh). Then the relay carries that pair's traffic for the
whole job. Mode "quiet": none of that (the undisturbed setup time); "direct": the strangers
without the relay (setup time with strangers, no Python relay in the path).
RC_TEST_FD_HEADROOM=n: the last rank may open only n more descriptors from just before
init() (its strangers then exhaust them: it must drop them to let its peers in).

Records: "setup" {seconds: of init(), connect_seconds: of its part after the addresses'
round (connections, proofs, the end of bootstrap), dropped: the setup warning's count, reasons},
"replay" {refused, detail} (rank 0), "after" {refused: every listener port refuses a
connection once init() returned}, "sums" {ok}, "done". Rank 0's strangers make
ATTEMPTS connections at every listener; rank 1 also sees the replay.

The tcp address blob (csrc/transport/tcp/device.cc, Address): u32 magic, i32 rank,
i32 size, u8 IP version, u8 pad, u16 port, 16 bytes IP, u64 nonce; then the control
region's 64 packed bytes (csrc/comm/communicator.cc, address()). The handshake's wire
format is csrc/transport/tcp/handshake.cc's.
"""

import ipaddress
import logging
import os
import select
import socket
import struct
import sys
import threading
import time

import numpy as np
from mpi4py import MPI

from common import emit, ignore_launcher_notifications, main, set_rank
import rdmacoll as rc
from rdmacoll import bootstrap

WORLD = MPI.COMM_WORLD
IDLE, GARBAGE, FORGED, WRONG_NONCE = 16, 2, 2, 1
ATTEMPTS = IDLE + GARBAGE + FORGED + WRONG_NONCE
HELLO = struct.Struct("<IiiiQQ16s")  # magic "RCH2", from, to, size, to nonce, from nonce, challenge
REPLY, PROOF, ACK = 64, 40, 8
ADDRESS = struct.Struct("<IiiBBH16sQ")
WAIT_S = 30


def listener_of(blob):
    """(ip, port, nonce) of a rank's tcp address blob."""
    _magic, _rank, _size, version, _pad, port, ip, nonce = ADDRESS.unpack_from(blob, 0)
    host = str(ipaddress.ip_address(ip[:4] if version == 4 else ip))
    return host, port, nonce


def read_exactly(s, n):
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            return data
        data += chunk
    return data


class Strangers:
    """Rank 0's process attacking every listener; keeps its sockets open until close()."""

    def __init__(self):
        self.socks = []
        self.threads = []

    def attack(self, host, port, nonce, size, to):
        for _ in range(IDLE):
            self.socks.append(socket.create_connection((host, port)))
        for _ in range(GARBAGE):
            s = socket.create_connection((host, port))
            s.sendall(os.urandom(300))
            self.socks.append(s)
        for _ in range(FORGED):
            self._forged(host, port, HELLO.pack(0x32484352, 0, to, size, nonce, 1234, os.urandom(16)))
        wrong = HELLO.pack(0x32484352, 0, to, size, nonce ^ 1, 1234, os.urandom(16))
        s = socket.create_connection((host, port))
        s.sendall(wrong)
        self.socks.append(s)

    def _forged(self, host, port, hello):
        s = socket.create_connection((host, port))
        s.settimeout(WAIT_S)
        self.socks.append(s)

        def run():
            try:
                s.sendall(hello)
                if len(read_exactly(s, REPLY)) == REPLY:
                    s.sendall(struct.pack("<II", 0x32504352, 0) + os.urandom(32))
                    read_exactly(s, ACK)
            except OSError:
                pass

        t = threading.Thread(target=run, daemon=True)
        t.start()
        self.threads.append(t)

    def close(self):
        for t in self.threads:
            t.join(WAIT_S)
        for s in self.socks:
            s.close()


class ReplayingRelay:
    """Rank 0's connection to rank 1, through this process: records rank 0's hello and
    proof, replays them to rank 1 on a connection of its own (which must be refused),
    then completes the real handshake and forwards both ways until either side closes."""

    def __init__(self, target):
        self.target = target
        self.server = socket.create_server((target[0], 0))
        self.port = self.server.getsockname()[1]
        self.result = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _replay(self, hello, proof):
        with socket.create_connection(self.target, timeout=WAIT_S) as s:
            s.sendall(hello)
            reply = read_exactly(s, REPLY)
            if len(reply) != REPLY:
                return False, "no reply to the replayed hello"
            s.sendall(proof)
            ack = read_exactly(s, ACK)
            return not ack, f"the listener answered the replayed proof with {len(ack)} bytes"

    def _run(self):
        a, _ = self.server.accept()
        self.server.close()
        b = socket.create_connection(self.target)
        hello = read_exactly(a, HELLO.size)
        b.sendall(hello)
        a.sendall(read_exactly(b, REPLY))
        proof = read_exactly(a, PROOF)
        self.result = self._replay(hello, proof)
        b.sendall(proof)
        pipes = {a: b, b: a}
        while True:
            ready, _, _ = select.select(list(pipes), [], [])
            for s in ready:
                data = s.recv(1 << 20)
                if not data:
                    return
                pipes[s].sendall(data)


class Exchange:
    """MPI's exchange, with rank 0's strangers let loose in the round of addresses."""

    def __init__(self, inner, mode):
        self.inner, self.mode = inner, mode
        self.name, self.rank, self.size = inner.name, inner.rank, inner.size
        self.strangers = Strangers()
        self.relay = None
        self.ports = []
        self.connecting = None  # when the addresses were handed back: connections begin

    def bcast(self, obj):
        return self.inner.bcast(obj)

    def barrier(self):
        self.inner.barrier()

    def allgather(self, obj):
        got = self.inner.allgather(obj)
        if not (isinstance(obj, bytes) and len(obj) > ADDRESS.size and all(isinstance(g, bytes) for g in got)):
            return got
        listeners = [listener_of(b) for b in got]
        self.ports = [(h, p) for h, p, _ in listeners]
        if self.mode in ("strangers", "direct"):
            if self.rank == 0:
                for r, (host, port, nonce) in enumerate(listeners):
                    self.strangers.attack(host, port, nonce, self.size, r)
            if self.rank == 0 and self.mode == "strangers":
                self.relay = ReplayingRelay(listeners[1][:2])
                blob = bytearray(got[1])
                struct.pack_into("<H", blob, 14, self.relay.port)
                got = list(got)
                got[1] = bytes(blob)
            self.inner.barrier()  # every listener has its strangers before anyone connects
        self.connecting = time.perf_counter()
        return got


class Warnings(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def body():
    mode = sys.argv[1]
    rank = WORLD.Get_rank()
    set_rank(rank)
    ignore_launcher_notifications()
    ex = Exchange(bootstrap.mpi.exchange(), mode)
    bootstrap.choose = lambda config=None, env=None, comm=None: ex
    caught = Warnings()
    logging.getLogger("rdmacoll").addHandler(caught)
    headroom = os.environ.get("RC_TEST_FD_HEADROOM")
    if headroom and rank == WORLD.Get_size() - 1:  # the last rank: little room for descriptors
        import resource

        open_now = len(os.listdir("/proc/self/fd"))
        resource.setrlimit(
            resource.RLIMIT_NOFILE, (open_now + int(headroom), resource.getrlimit(resource.RLIMIT_NOFILE)[1])
        )
    t0 = time.perf_counter()
    rc.init()
    end = time.perf_counter()
    seconds, connect = end - t0, end - ex.connecting
    turned = [w for w in caught.lines if "did not prove this job's secret" in w]
    count = int(turned[0].split("] ", 1)[-1].split()[0]) if turned else 0
    emit("setup", seconds=seconds, connect_seconds=connect, dropped=count, reasons=turned[0] if turned else "")
    if rank == 0 and ex.relay is not None:
        refused, detail = ex.relay.result or (False, "the relay saw no handshake")
        emit("replay", refused=bool(refused), detail=detail)
    refused = []
    for host, port in ex.ports:
        try:
            socket.create_connection((host, port), timeout=5).close()
            refused.append(False)
        except ConnectionRefusedError:
            refused.append(True)
    emit("after", refused=all(refused), ports=ex.ports)
    ok = True
    for n in (1, 1000, 300_000):
        x = np.arange(n, dtype=np.float64) * (rank + 1)
        expect = np.arange(n, dtype=np.float64) * (WORLD.Get_size() * (WORLD.Get_size() + 1) // 2)
        ok &= bool(np.array_equal(rc.allreduce(x, op=rc.Sum), expect))
    emit("sums", ok=ok)
    rc.shutdown()
    ex.strangers.close()
    emit("done")


main(body)
