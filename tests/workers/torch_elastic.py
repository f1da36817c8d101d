"""A training job that torchrun's elastic agent restarts (tests/test_torchrun_elastic.py):
init_process_group("rdmacoll") in every world the agent makes, checkpoints as torchrun's
documentation asks of elastic jobs (rank 0 saves after every step; each world resumes
from the last one), and at the end a reference computed here without communication.

argv: checkpoint path, steps, seconds to sleep after each step (so that a test can act
while a world trains), then optionally:
  kill=RESTART:RANK:K  in the world of that restart count, that rank SIGKILLs itself K
                       steps after the world began (a worker lost while its agent lives)
  hold=SIZE:FROM:K     (any number) the world of SIZE ranks that began at step FROM holds
                       K steps in, taking barriers until one fails or its agent stops it:
                       the test loses a node there, or adds one, while that world is sure
                       to be training. Keyed by what every rank of a world shares: a grown
                       world's ranks have different restart counts (each agent counts its own).

Each step, rank r of a world of n computes the gradient of a float64 linear layer on an
input of (step + 1) * (r + 1) and the ranks average it (all_reduce, then / n). The
checkpoint keeps the world size of every step taken, so the reference replays the same
steps: the mean of the n ranks' gradients, computed by one process.

Records: "world" {restart, size, from_step, group}; "step" {step, size} (rank 0's, every
step); "holding" {step, size, from_step} (as a world's ranks start to hold); "done" {steps, sizes (per step), digest (the parameters' bytes), error (the largest
difference from the reference)}.
"""

import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from common import digest, emit, main, set_rank

IN, OUT, LR = 8, 4, 0.01


def model():
    torch.manual_seed(0)
    return torch.nn.Linear(IN, OUT, dtype=torch.float64)


def gradients(m, step, r):
    x = torch.full((2, IN), float((step + 1) * (r + 1)), dtype=torch.float64)
    m.zero_grad()
    m(x).square().sum().backward()
    return [p.grad.clone() for p in m.parameters()]


def apply(m, grads):
    with torch.no_grad():
        for p, g in zip(m.parameters(), grads):
            p -= LR * g


def reference(sizes):
    """The parameters after the steps taken in worlds of these sizes, by one process."""
    m = model()
    for step, n in enumerate(sizes):
        per_rank = [gradients(m, step, r) for r in range(n)]
        apply(m, [sum(gs) / n for gs in zip(*per_rank)])
    return m


def body():
    path, steps, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    kill = next((tuple(map(int, a[5:].split(":"))) for a in sys.argv[4:] if a.startswith("kill=")), None)
    holds = {tuple(map(int, a[5:].split(":"))) for a in sys.argv[4:] if a.startswith("hold=")}
    restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    dist.init_process_group("rdmacoll")
    r, n = dist.get_rank(), dist.get_world_size()
    set_rank(r)
    m, sizes = model(), []
    if os.path.exists(path):
        saved = torch.load(path)
        m.load_state_dict(saved["model"])
        sizes = saved["sizes"]
    began = len(sizes)
    emit("world", restart=restart, size=n, from_step=began, group=int(os.environ["GROUP_RANK"]))
    while len(sizes) < steps:
        step = len(sizes)
        if kill == (restart, r, step - began):
            os.kill(os.getpid(), signal.SIGKILL)
        if (n, began, step - began) in holds:
            emit("holding", step=step, size=n, from_step=began)
            while True:  # (until a peer is lost, the barrier raises, or the agent stops us)
                dist.barrier()
                time.sleep(0.05)
        grads = gradients(m, step, r)
        for g in grads:
            dist.all_reduce(g)
            g /= n
        apply(m, grads)
        sizes.append(n)
        if r == 0:
            torch.save({"model": m.state_dict(), "sizes": sizes}, path + ".tmp")
            os.replace(path + ".tmp", path)
            emit("step", step=step, size=n)
        dist.barrier()  # (no rank runs ahead of the checkpoint it would resume from)
        time.sleep(pause)
    want = reference(sizes)
    error = max(float((p - q).abs().max()) for p, q in zip(m.parameters(), want.parameters()))
    flat = torch.cat([p.detach().reshape(-1) for p in m.parameters()]).numpy()
    emit("done", steps=len(sizes), sizes=sizes, digest=digest(flat), error=error)
    dist.destroy_process_group()


main(body)
