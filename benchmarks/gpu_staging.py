"""GPU allreduce through rdmacoll's staging pipeline (docs/gpu.md) against its own stages and
gloo's CUDA path, in the same processes; every rank on its GPU (several on one GPU too):

    torchrun --nproc_per_node=2 benchmarks/gpu_staging.py      # RDMACOLL_CUDA_CHUNK_BYTES=8M ...

For 1, 16, 64 and 256 MiB of float32 on the GPU: rdmacoll's allreduce in place; each stage
alone on the whole message (a copy into page-locked host memory, rdmacoll's host allreduce of
pool memory, the copy back); gloo's allreduce of the CUDA tensor (torch.distributed). Rank 0
prints the medians of the iterations (barrier-aligned, each ended by a device
synchronisation), the ratio to the slowest stage (the pipeline's goal: at most 1.25 from 64
MiB on) and gloo's time over rdmacoll's (goal: at least 2); then 4 B, 1 KiB and 64 KiB.
Quote medians of several launches (scripts/gpu_check.sh runs it once per call).
"""

from __future__ import annotations

import os
import statistics
import time

import torch
import torch.distributed as dist

import rdmacoll as rc


def median_time(fn, iters, warm=2):
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(iters):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def bench(dev, r, p):
    gloo = dist.group.WORLD
    rows = []
    for mib in (1, 16, 64, 256):
        n = mib * (1 << 18)
        x = torch.ones(n, device=dev)
        pinned = torch.empty(n, pin_memory=True)
        host = rc.empty((n,), "float32")
        host[:] = 1
        iters = 10 if mib <= 64 else 5
        t_rc = median_time(lambda: rc.allreduce(x, op=rc.Sum, out=x), iters)
        t_d2h = median_time(lambda: pinned.copy_(x, non_blocking=True), iters)
        t_host = median_time(lambda: rc.allreduce(host, op=rc.Sum, out=host), iters)
        t_h2d = median_time(lambda: x.copy_(pinned, non_blocking=True), iters)
        t_gloo = median_time(lambda: dist.all_reduce(x, group=gloo), iters)
        slowest = max(t_d2h, t_host, t_h2d)
        rows.append((mib, t_rc, t_d2h, t_host, t_h2d, t_gloo, t_rc / slowest, t_gloo / t_rc))
    small = []
    for nbytes in (4, 1024, 65536):
        x = torch.ones(nbytes // 4, device=dev)
        t_rc = median_time(lambda: rc.allreduce(x, op=rc.Sum, out=x), 50, warm=5)
        t_gloo = median_time(lambda: dist.all_reduce(x, group=gloo), 50, warm=5)
        small.append((nbytes, t_rc, t_gloo))
    if r == 0:
        chunk = os.environ.get("RDMACOLL_CUDA_CHUNK_BYTES", "4M (default)")
        print(
            f"\nBENCH {p} ranks on one GPU ({torch.cuda.get_device_name(dev)}), chunk {chunk}; medians of iterations, ms"
        )
        print(
            "| MiB | rdmacoll | D2H alone | host allreduce alone | H2D alone | gloo (cuda) | rdmacoll / slowest stage "
            "| gloo / rdmacoll |"
        )
        print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for row in rows:
            print(
                "| {} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} |".format(
                    row[0], *(v * 1e3 for v in row[1:6]), row[6], row[7]
                )
            )
        print("\n| bytes | rdmacoll us | gloo (cuda) us |\n| ---: | ---: | ---: |")
        for b, a, g in small:
            print(f"| {b} | {a * 1e6:.1f} | {g * 1e6:.1f} |")
        print(f"staging page-locked: {rc._session.current().comm.device.pinned}", flush=True)


def main():
    local = int(os.environ["LOCAL_RANK"])
    dev = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group("gloo")
    rc.init()
    bench(dev, rc.rank(), rc.size())
    rc.shutdown()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
