"""rdmacoll's ibverbs transport against perftest's `ib_write_bw`, on the same RDMA device,
interleaved in the same run.

    export PYTHONPATH=build/cp311-cp311-linux_x86_64/hooks   # the test hooks (below)
    mpiexec -n 2 python benchmarks/ibverbs_vs_ib_write_bw.py [--sizes 64K,1M,4M] [--rounds 5]
    # in the Soft-RoCE guest:
    sudo python3 scripts/rdma_guest.py run -- env PYTHONPATH=$PYTHONPATH .venv/bin/mpiexec -n 2 \\
        .venv/bin/python benchmarks/ibverbs_vs_ib_write_bw.py
    # two guests as two hosts (1 rank each), --delay adds netem latency to their link:
    sudo python3 scripts/rdma_guest.py run --hosts 2 [--delay 250us] -- \\
        sh benchmarks/ibverbs_two_guests.sh .venv $PYTHONPATH [benchmark arguments]

Per round and size, three measurements, one after the other (never two at once):
  ib_write_bw   perftest's RDMA WRITE bandwidth between two processes on this host (rank 0
                starts its server and client; -s SIZE, -n ITERS, default queue depth)
  write loop    the transport itself (_rdmacoll_testing.TransportProbe, the
                conformance tests' handle on a backend; the test hooks' module, which
                `pip install .` builds into build/<wheel tag>/hooks/, never installed): rank
                0 writes SIZE bytes from registered memory into rank 1's registered
                region, ITERS times, posting each and waiting only for the last one's
                ticket (deferred completion, csrc/transport/transport.h; cores before it
                waited for every write's completion); bytes / time
  allreduce     rc.allreduce of SIZE bytes of float32 over RDMACOLL_TRANSPORT=ibverbs, busbw
                (algbw * 2(n-1)/n, as nccl-tests prints it)
The table shows medians over rounds and the ratios to ib_write_bw. Under emulation the
absolute numbers mean nothing; the ratios are the result.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import time

from mpi4py import MPI

import _rdmacoll_testing as _testing
import rdmacoll as rc

WORLD = MPI.COMM_WORLD


def ib_write_bw(
    device: str, gid_index: int, size: int, iters: int, port: int, peer: str | None, both_ways: bool = False
) -> float:
    """MB/s (10^6 bytes) that ib_write_bw reports as its average: server and client on rank
    0, or (peer: rank 1's address) the server on rank 1 and the client on rank 0. Every rank
    calls it; rank 0's result, broadcast."""
    args = ["ib_write_bw", "-d", device, "-x", str(gid_index), "-s", str(size), "-n", str(iters), "-F", "-p", str(port)]
    if both_ways:
        args.append("-b")
    rank = WORLD.Get_rank()
    server = None
    if rank == (0 if peer is None else 1):
        server = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    WORLD.Barrier()
    mbps = None
    try:
        if rank == 0:
            for _ in range(50):  # the client needs the server listening
                time.sleep(0.2)
                client = subprocess.run(args + [peer or "127.0.0.1"], capture_output=True, text=True, timeout=300)
                if client.returncode == 0:
                    break
            else:
                raise RuntimeError(f"ib_write_bw client failed: {client.stdout}{client.stderr}")
            for line in client.stdout.splitlines():
                f = line.split()
                if len(f) >= 4 and f[0] == str(size) and re.fullmatch(r"[\d.]+", f[3]):
                    mbps = float(f[3])
            if mbps is None:
                raise RuntimeError(f"no result in ib_write_bw's output:\n{client.stdout}")
        if server is not None:
            server.wait(timeout=60)
    finally:
        if server is not None and server.poll() is None:
            server.kill()
            server.wait()
    return WORLD.bcast(mbps, root=0)


class WriteLoop:
    """Rank 0 writes into rank 1 through the transport, nothing else in the way."""

    def __init__(self, max_size: int, settings: dict):
        self.rank = WORLD.Get_rank()
        self.peer = 1 - self.rank
        self.probe = _testing.TransportProbe("ibverbs", self.rank, 2, settings)
        addresses = WORLD.allgather(self.probe.address())
        self.probe.connect(self.peer, addresses[self.peer])
        self.idx = self.probe.allocate(max_size)
        self.probe.view(self.idx)[:] = 1
        self.remote = WORLD.allgather(self.probe.pack(self.idx))[self.peer]

    def run(self, size: int, iters: int) -> float:
        """MB/s of rank 0's writes (the last carries an immediate rank 1 waits for)."""
        WORLD.Barrier()
        mbps = 0.0
        if self.rank == 0:
            src = self.probe.view(self.idx)[:size]
            t = time.perf_counter()
            ticket = 0
            for i in range(iters):
                ticket = self.probe.write(self.peer, src, self.remote, 0, i if i == iters - 1 else None)
            if hasattr(self.probe, "wait_written"):  # (older cores waited in write)
                self.probe.wait_written(self.peer, ticket)
            mbps = size * iters / (time.perf_counter() - t) / 1e6
        else:
            end = time.monotonic() + 300
            while self.probe.poll(self.peer) is None:
                if time.monotonic() > end:
                    raise TimeoutError("the write loop's last immediate never came")
        return WORLD.bcast(mbps, root=0)


def allreduce_busbw(size: int, iters: int) -> float:
    n = rc.size()
    x = rc.empty(size // 4, "float32")
    x[:] = 1
    out = rc.empty(size // 4, "float32")
    rc.allreduce(x, op=rc.Sum, out=out)
    WORLD.Barrier()
    t = time.perf_counter()
    for _ in range(iters):
        rc.allreduce(x, op=rc.Sum, out=out)
    dt = WORLD.allreduce(time.perf_counter() - t, op=MPI.MAX)
    return size * iters / dt / 1e6 * 2 * (n - 1) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="64K,1M,4M")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--bytes-per-run", default="256M", help="each measurement moves about this much")
    ap.add_argument("--device", default="rxe0", help="the device ib_write_bw uses (RDMACOLL_IB_HCA: rdmacoll's)")
    ap.add_argument(
        "--peer-address", help="rank 1's address when the ranks are on two hosts (ib_write_bw's server runs there)"
    )
    ap.add_argument(
        "--both-ways",
        action="store_true",
        help="also ib_write_bw -b (both directions at once, as an allreduce's two ranks send)",
    )
    ap.add_argument("--gid-index", type=int, default=1, help="ib_write_bw -x (1: RoCE v2, IPv4 on rxe)")
    ap.add_argument(
        "--qps", type=int, default=1, help="rdmacoll's queue pairs per peer (RDMACOLL_IB_QPS_PER_CONNECTION)"
    )
    a = ap.parse_args()
    if WORLD.Get_size() != 2:
        raise SystemExit("run with 2 ranks: mpiexec -n 2 python benchmarks/ibverbs_vs_ib_write_bw.py")
    if shutil.which("ib_write_bw") is None:
        raise SystemExit("ib_write_bw not found (Debian: apt install perftest)")
    sizes = [rc._core.parse_size(s) for s in a.sizes.split(",")]
    total = rc._core.parse_size(a.bytes_per_run)
    lanes = {"ib_qps_per_connection": a.qps}
    rc.init({"transport": "ibverbs", **lanes})
    loop = WriteLoop(max(sizes), lanes)
    rows: dict[int, dict[str, list[float]]] = {s: {"ib": [], "ibb": [], "loop": [], "ar": []} for s in sizes}
    for rnd in range(a.rounds):
        for size in sizes:
            iters = max(10, total // size)
            rows[size]["ib"].append(ib_write_bw(a.device, a.gid_index, size, iters, 18515 + rnd % 50, a.peer_address))
            if a.both_ways:
                port = 18575 + rnd % 50
                rows[size]["ibb"].append(ib_write_bw(a.device, a.gid_index, size, iters, port, a.peer_address, True))
            rows[size]["loop"].append(loop.run(size, iters))
            rows[size]["ar"].append(allreduce_busbw(size, max(5, iters // 4)))
    if WORLD.Get_rank() == 0:
        where = f"two hosts (rank 1 at {a.peer_address})" if a.peer_address else "one host"
        print(f"# {a.device}, 2 processes on {where}, medians of {a.rounds} interleaved rounds; MB/s = 10^6 bytes/s")
        head = f"{'size':>9} {'ib_write_bw':>12} {'write loop':>11} {'ratio':>6} {'allreduce busbw':>16} {'ratio':>6}"
        print(head + (f" {'ib_write_bw -b':>15} {'allreduce / (-b / 2)':>21}" if a.both_ways else ""))
        for size in sizes:
            m = {k: statistics.median(v) for k, v in rows[size].items() if v}
            line = (
                f"{size:>9} {m['ib']:>12.0f} {m['loop']:>11.0f} {m['loop'] / m['ib']:>6.2f} {m['ar']:>16.0f} "
                f"{m['ar'] / m['ib']:>6.2f}"
            )
            if a.both_ways:  # -b reports both directions together; each rank of the allreduce sends one way
                line += f" {m['ibb']:>15.0f} {m['ar'] / (m['ibb'] / 2):>21.2f}"
            print(line)
    rc.shutdown()


if __name__ == "__main__":
    main()
