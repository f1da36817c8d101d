"""rdmacoll over tcp vs torch.distributed (gloo) vs a raw TCP exchange, 2 ranks, same run.

    RDMACOLL_TRANSPORT=tcp mpiexec -n 2 python benchmarks/tcp_vs_raw.py [--sizes 1K,...,256M] [--rounds 3]

For every size, in turn within each round (so machine noise hits them alike):
  rdmacoll  rc.allreduce(x, op=Sum) on float32 (the transport RDMACOLL_TRANSPORT picks);
  gloo      torch.distributed.all_reduce on the same bytes (skipped without torch);
  raw       the two processes send each other `size` bytes at once over one TCP
            connection (a sender thread and the main thread receiving), no framing;
  one-way   rank 0 sends `size` bytes to rank 1 over the same connection, nothing back.
Each round times a batch (barrier-aligned; the slower rank's time counts); the table
shows the median round. busbw = algbw * 2(n-1)/n (= algbw at 2 ranks, which is the
bytes each direction of a link carries: comparable with raw's per-direction rate).
Latency: the 8-byte allreduce time vs the raw 8-byte ping-pong round trip.

Why raw, not one-way, bounds the allreduce: an allreduce of 2 ranks must carry n bytes in
each direction (each rank needs the other's n bytes, or their reduction), and over
loopback both directions share the same CPUs that copy the bytes in and out of the
kernel. One-way shows what a link carries when only one direction is busy; on the 2-core
development machine that is about twice the per-direction rate of the exchange, so no
allreduce over TCP reaches it.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import threading

import numpy as np
from mpi4py import MPI

import rdmacoll as rc
from allreduce_vs_mpi import parse_size, time_batch  # benchmarks/ is on sys.path when run as a script

SIZES = "1K,4K,16K,64K,256K,1M,4M,16M,64M,256M"


def raw_pair(comm) -> socket.socket:
    """One TCP connection between ranks 0 and 1 (loopback or the first interface's address)."""
    rank = comm.Get_rank()
    if rank == 0:
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        comm.send(srv.getsockname()[1], dest=1)
        s, _ = srv.accept()
        srv.close()
    else:
        port = comm.recv(source=0)
        s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        s.setsockopt(socket.SOL_SOCKET, opt, 4 << 20)
    return s


def recv_exact(s: socket.socket, view: memoryview):
    got = 0
    while got < len(view):
        n = s.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("peer closed")
        got += n


def exchange(s, out: np.ndarray, into: np.ndarray):
    t = threading.Thread(target=s.sendall, args=(memoryview(out).cast("B"),))
    t.start()
    recv_exact(s, memoryview(into).cast("B"))
    t.join()


def one_way(s, rank, out: np.ndarray, into: np.ndarray):
    if rank == 0:
        s.sendall(memoryview(out).cast("B"))
        recv_exact(s, memoryview(into).cast("B")[:1])  # the receiver has everything
    else:
        recv_exact(s, memoryview(into).cast("B"))
        s.sendall(b"\0")


def ping_pong(s, rank, buf):
    mv = memoryview(buf).cast("B")
    if rank == 0:
        s.sendall(mv)
        recv_exact(s, mv)
    else:
        recv_exact(s, mv)
        s.sendall(mv)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default=SIZES)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-gloo", action="store_true")
    a = ap.parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    assert size == 2, "2 ranks"
    rc.init()
    sock = raw_pair(comm)
    dist = None
    if not a.no_gloo:
        try:
            import torch
            import torch.distributed as dist

            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            port = comm.bcast(29500 + os.getpid() % 2000 if rank == 0 else None, root=0)
            os.environ["MASTER_PORT"] = str(port)
            dist.init_process_group("gloo", rank=rank, world_size=size)
        except Exception as e:  # noqa: BLE001 - reported, gloo column left out
            if rank == 0:
                print(f"# gloo unavailable: {e}")
            dist = None
    sizes = [parse_size(x) for x in a.sizes.split(",")]
    results = {n: {"rdmacoll": [], "gloo": [], "raw": [], "one-way": []} for n in sizes}
    lat = {"rdmacoll": [], "raw": []}
    for _ in range(a.rounds):
        for n in sizes:
            count = max(1, n // 4)
            x = np.ones(count, np.float32)
            out = np.empty_like(x)
            iters = max(3, min(200, (64 << 20) // max(n, 1)))
            rc.allreduce(x, op=rc.Sum, out=out)
            results[n]["rdmacoll"].append(time_batch(lambda: rc.allreduce(x, op=rc.Sum, out=out), iters, comm))
            if dist is not None:
                tx = torch.ones(count, dtype=torch.float32)
                dist.all_reduce(tx)
                results[n]["gloo"].append(time_batch(lambda: dist.all_reduce(tx), iters, comm))
            into = np.empty(count, np.float32)
            exchange(sock, x, into)
            results[n]["raw"].append(time_batch(lambda: exchange(sock, x, into), iters, comm))
            one_way(sock, rank, x, into)
            results[n]["one-way"].append(time_batch(lambda: one_way(sock, rank, x, into), iters, comm))
        x8 = np.ones(2, np.float32)
        o8 = np.empty_like(x8)
        lat["rdmacoll"].append(time_batch(lambda: rc.allreduce(x8, op=rc.Sum, out=o8), 500, comm))
        b8 = np.zeros(8, np.uint8)
        lat["raw"].append(time_batch(lambda: ping_pong(sock, rank, b8), 500, comm))
    if rank == 0:
        print(
            f"# 2 ranks, float32 Sum, transport {rc._session.current().comm.transport}, median of {a.rounds} rounds; "
            f"load average {os.getloadavg()[0]:.1f}"
        )
        print(
            f"# {'size':>10} {'rdmacoll GB/s':>14} {'gloo GB/s':>10} {'raw GB/s':>9} {'one-way GB/s':>13} {'vs gloo':>8} {'vs raw':>7}"
        )
        for n in sizes:
            med = {k: statistics.median(v) for k, v in results[n].items() if v}
            bw = {k: n / t / 1e9 for k, t in med.items()}
            g = bw.get("gloo")
            print(
                f"  {n:>10} {bw['rdmacoll']:>14.3f} {g if g else float('nan'):>10.3f} {bw['raw']:>9.3f} {bw['one-way']:>13.3f} "
                f"{(bw['rdmacoll'] / g) if g else float('nan'):>8.2f} {bw['rdmacoll'] / bw['raw']:>7.2f}"
            )
        r, p = statistics.median(lat["rdmacoll"]) * 1e6, statistics.median(lat["raw"]) * 1e6
        print(f"# 8 B: rdmacoll allreduce {r:.1f} us, raw TCP ping-pong round trip {p:.1f} us, ratio {r / p:.2f}")
    sock.close()
    if dist is not None:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
