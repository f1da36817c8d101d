"""A job of Horovod's elastic API under rdmacoll-run --elastic (tests/test_elastic.py):
hvd.elastic.run over a TorchState holding a float64 linear layer, its
DistributedOptimizer and the world size of every committed step (`sizes`: a new list per
step, so that a restore takes the committed one back).

argv: steps, then plan items, all optional:
  kill=HOST:STEP[,HOST:STEP...]  the worker on HOST (or HOST/SLOT: that slot's) SIGKILLs itself in step STEP, after its backward
                     (its gradients' allreduces under way), before the optimizer's step
  grow=STEP:LINE     after committing step STEP, rank 0 adds LINE ("host:slots") to the
                     discovery file (env HOSTS_FILE) and every rank checks for changed
                     hosts (state.check_host_updates) until the driver's notice comes
  shrink=STEP:HOST   the same, removing HOST's line
  pause=SECONDS      sleep after each step (a benchmark's steady pace)
  stall=STEP:SECONDS every worker sleeps in step STEP before its commit (a long step: no
                     collective and no look at the driver's store meanwhile)
  forming=HOST:WORLD:POINT[,...]  the worker on HOST SIGKILLs itself while world WORLD
                     bootstraps, at POINT: "start" (before its first key: rank 0 waits for
                     it in the bootstrap's first step), "exchange" (entering the
                     bootstrap's third store exchange: the others wait for its keys) or
                     "connect" (its address exchanged, before it connects: the others
                     connect to a dead peer); a world formed in place has "start" (before
                     its key) and "connect" (after the round of keys)
  cycles=N           N cycles of a host added and its worker lost: in each world of 2, rank
                     0 adds host 127.0.0.(11 + k) to the discovery file (k: hosts it added
                     before) and every rank waits for the notice; in the world of 3, the
                     new worker SIGKILLs itself in its second step. Rank 0 (localhost, never
                     lost) reports what it holds at the start of every world

Data: Horovod's ElasticSampler over DATASET sample indices (shuffled, seed 7), kept in the
TorchState; each step every rank takes the next BATCH indices of its share (a new epoch,
set_epoch, when the shares are used up) and records the batch (record_batch); each world
iterates the sampler anew (what the epoch has left, re-partitioned). Each step, rank r takes
the gradient of sum((W x + b)^2) over its batch's rows, x filled with ((index mod 7) + 1) /
10 (the parameters stay of order 1), averaged by the DistributedOptimizer, and SGD; every
rank's batch is gathered into the state (`batches`: [epoch, [batch of rank 0, 1, ...]] per
committed step). The reference replays the committed batches in one process.

Records: "world" {size, host, from_step, in_place (rdmacoll formed it over the last world's
connections), transport} at the start of every world (after its sync);
"step" {step, size} (rank 0's, after each commit); "killing" {step} (the worker that
kills itself, just before); "holds" {size, fds, threads, memfd_maps} (cycles: rank 0's
open descriptors, threads and mappings of rdmacoll's shared memory, at each world's start);
"reset" {size, host} from the reset callback (state.register_reset_callbacks); "done" {sizes,
batches, digest (the parameters' bytes), error (the largest difference from the reference)}.
"""

import importlib
import os
import signal
import sys
import time

import torch
from common import digest, emit, main, set_rank

# benchmarks/elastic_recovery.py runs this script under real Horovod's elastic driver too
hvd = importlib.import_module(os.environ.get("ELASTIC_HVD", "rdmacoll.frameworks.torch"))

IN, OUT, LR = 8, 4, 0.01
DATASET, BATCH = 40, 2  # samples, and samples per rank and step


def model():
    torch.manual_seed(0)
    return torch.nn.Linear(IN, OUT, dtype=torch.float64)


def loss(m, indices):
    """The loss of a batch: a row per sample index, filled with ((index mod 7) + 1) / 10."""
    x = torch.tensor([[((i % 7) + 1) / 10] * IN for i in indices], dtype=torch.float64).reshape(-1, IN)
    return m(x).square().sum()


def reference(batches):
    """The parameters after the committed steps, each a list of every rank's batch (sample
    indices), by one process: the average of the ranks' gradients, SGD."""
    m = model()
    for _epoch, ranks in batches:
        grads = []
        for indices in ranks:
            m.zero_grad()
            loss(m, indices).backward()
            grads.append([p.grad.clone() for p in m.parameters()])
        with torch.no_grad():
            for p, *gs in zip(m.parameters(), *grads):
                p -= LR * (sum(gs) / len(ranks))
    return m


def edit_hosts(add=None, drop=None):
    path = os.environ["HOSTS_FILE"]
    with open(path) as f:
        lines = [ln.strip() for ln in f if ln.strip()]
    if add and add not in lines:
        lines.append(add)
    if drop:
        lines = [ln for ln in lines if ln.split(":")[0] != drop]
    with open(path + ".tmp", "w") as f:
        f.write("".join(ln + "\n" for ln in lines))
    os.replace(path + ".tmp", path)


def holds():
    with open("/proc/self/maps") as f:
        names = [line.split("memfd:")[1].split()[0] for line in f if "memfd:rdmacoll" in line]
    # threads: the fewest of 6 looks 50 ms apart (the async engine's progress thread ends
    # itself once its queue is empty: the sync's may still be ending at the first look)
    threads = []
    for _ in range(6):
        threads.append(len(os.listdir("/proc/self/task")))
        time.sleep(0.05)
    return {
        "fds": len(os.listdir("/proc/self/fd")),
        "threads": min(threads),
        "memfd_maps": len(names),
        "names": names,
    }


def hosts_added():
    with open(os.environ["HOSTS_FILE"]) as f:
        return sum(1 for ln in f if ln.startswith("127.0.0.") and int(ln.split(":")[0].split(".")[3]) > 10)


def transport():
    """rdmacoll's transport in this world; None under Horovod."""
    if not hvd.__name__.startswith("rdmacoll"):
        return None
    from rdmacoll import _session

    return _session.current().comm.transport


def formed_in_place():
    """Whether rdmacoll formed this world in place (rdmacoll/_in_place.py); None under Horovod."""
    if not hvd.__name__.startswith("rdmacoll"):
        return None
    from rdmacoll import _session
    from rdmacoll.bootstrap import elastic

    place = getattr(elastic, "Place", None)  # (a build before it: benchmarks/elastic_recovery.py --baseline)
    return place is not None and isinstance(_session.current().world.exchange, place)


def die_while_forming(spec, me):
    """The plan's forming= items for this worker: rdmacoll's bootstrap exchange, wrapped."""
    from rdmacoll.bootstrap import elastic, store

    points = {}
    for item in spec.split(","):
        host, world, point = item.rsplit(":", 2)
        if host in me:
            points[int(world)] = point
    if not points:
        return
    original, calls = store.StoreExchange.allgather, {}
    original_init = store.StoreExchange.__init__

    def die(world, point):
        emit("killing", world=world, point=point)
        os.kill(os.getpid(), signal.SIGKILL)

    def allgather(self, obj):
        world = elastic.member().world
        calls[world] = calls.get(world, 0) + 1
        if points.get(world) == "exchange" and calls[world] == 3:
            die(world, "exchange")
        out = original(self, obj)
        if points.get(world) == "connect" and isinstance(obj, bytes):  # (the core's address)
            die(world, "connect")
        return out

    def init(self, *args, **kwargs):
        world = elastic.member().world
        if points.get(world) == "start":
            die(world, "start")
        original_init(self, *args, **kwargs)

    original_gather = elastic.Place.gather

    def gather(self, value):  # (forming a world in place: rdmacoll/_in_place.py)
        if points.get(self.round) == "start":
            die(self.round, "start")
        out = original_gather(self, value)
        if points.get(self.round) == "connect":
            die(self.round, "connect")
        return out

    store.StoreExchange.allgather = allgather
    store.StoreExchange.__init__ = init
    elastic.Place.gather = gather


def body():
    steps = int(sys.argv[1])
    plan = dict(a.split("=", 1) for a in sys.argv[2:])
    host = os.environ.get("RDMACOLL_ELASTIC_HOST") or os.environ["HOROVOD_HOSTNAME"]
    me = {host, f"{host}/{os.environ.get('RDMACOLL_ELASTIC_SLOT', os.environ.get('HOROVOD_LOCAL_RANK'))}"}
    pause = float(plan.get("pause", 0))
    stall = tuple(map(float, plan["stall"].split(":"))) if "stall" in plan else (-1, 0)
    kills = {tuple(k.rsplit(":", 1)) for k in plan["kill"].split(",")} if "kill" in plan else set()
    edits = {}
    for what in ("grow", "shrink"):
        if what in plan:
            step, arg = plan[what].split(":", 1)
            edits[int(step)] = (what, arg)
    if "forming" in plan:
        die_while_forming(plan["forming"], me)

    hvd.init()
    m = model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=LR), named_parameters=m.named_parameters())
    # Horovod's ElasticSampler over DATASET samples, kept in the state: each step takes the
    # next BATCH of this rank's share; a reset re-partitions what the epoch has left
    sampler = hvd.elastic.ElasticSampler(range(DATASET), shuffle=True, seed=7)
    state = hvd.elastic.TorchState(m, opt, sampler=sampler, sizes=[], batches=[], epoch=0)

    state.register_reset_callbacks([lambda: emit("reset", size=hvd.size(), host=host)])

    cycles = int(plan.get("cycles", 0))
    newcomer = cycles and host not in ("localhost", "127.0.0.2")
    joined = []  # the step each world of this worker began at

    @hvd.elastic.run
    def train(state):  # (after each sync: this world's state is rank 0's)
        set_rank(hvd.rank())
        emit(
            "world",
            size=hvd.size(),
            host=host,
            from_step=len(state.sizes),
            in_place=formed_in_place(),
            transport=transport(),
        )
        joined.append(len(state.sizes))
        if cycles and hvd.size() == 2:
            if host == "localhost":
                emit("holds", size=hvd.size(), **holds())
            if hvd.broadcast_object(hosts_added() < cycles):  # (rank 0's reading: the file changes)
                if hvd.rank() == 0:
                    edit_hosts(add=f"127.0.0.{11 + hosts_added()}:1")
                while True:  # until the driver's notice: HostsUpdatedInterrupt on every rank
                    time.sleep(0.05)
                    state.check_host_updates()
        share = iter(state.sampler)  # (this world's: what the epoch has left, re-partitioned)
        while len(state.sizes) < steps:
            step, r, n = len(state.sizes), hvd.rank(), hvd.size()
            mine = [i for _, i in zip(range(BATCH), share)]
            if not mine:  # the epoch is done, on every rank alike (equal shares)
                state.epoch += 1
                state.sampler.set_epoch(state.epoch)
                share = iter(state.sampler)
                mine = [i for _, i in zip(range(BATCH), share)]
            opt.zero_grad()
            loss(m, mine).backward()
            if any(h in me and k == str(step) for h, k in kills) or (newcomer and step == joined[0] + 1):
                emit("killing", step=step)
                os.kill(os.getpid(), signal.SIGKILL)
            opt.step()
            if step == stall[0]:
                time.sleep(stall[1])
            state.batches = state.batches + [[state.epoch, hvd.allgather_object(mine)]]
            state.sampler.record_batch(step, BATCH)
            state.sizes = state.sizes + [n]
            state.commit()
            if r == 0:
                emit("step", step=step, size=n)
            time.sleep(pause)
            if step in edits:
                what, arg = edits[step]
                if r == 0:
                    edit_hosts(add=arg) if what == "grow" else edit_hosts(drop=arg)
                while True:  # until the driver's notice: HostsUpdatedInterrupt on every rank
                    time.sleep(0.05)
                    state.check_host_updates()

    train(state)
    want = reference(state.batches)
    error = max(float((p - q).abs().max()) for p, q in zip(m.state_dict().values(), want.state_dict().values()))
    flat = torch.cat([p.detach().reshape(-1) for p in m.parameters()]).numpy()
    emit("done", sizes=state.sizes, digest=digest(flat), error=error, host=host, batches=state.batches)
    hvd.shutdown()


main(body)
