"""Process sets under rdmacoll's Horovod torch API or, to compare, real Horovod
(RC_TEST_HVD=horovod.torch); with rdmacoll also the plain API (NumPy).

argv[1]: "static" (hvd.init(process_sets=[...]): every set shape at once), "dynamic"
(hvd.init(process_sets="dynamic"): add and remove while other sets run) or "env" (the
dynamic body, switched on by the environment instead).

Records: "check" {name, ok, detail}: a result against the NumPy reference computed here
from every rank's deterministic input; "outcome" {name, value}: what a call gave (a
digest of its result, or the exception's type), which test_process_sets.py compares
between rdmacoll and Horovod; "done".
"""

import importlib
import os
import sys
import time

import numpy as np
import torch
from common import digest, emit, main, set_rank

MOD = os.environ.get("RC_TEST_HVD", "rdmacoll.frameworks.torch")
hvd = importlib.import_module(MOD)
UNDER_HOROVOD = MOD.startswith("horovod")


_RECORDS = []


def record(kind, **fields):
    """Kept until the end: flush_records() writes them one rank at a time (Open MPI
    forwards the ranks' output in pieces that interleave inside lines when many ranks
    write at once)."""
    _RECORDS.append((kind, fields))


def flush_records(rank, size):
    for q in range(size):
        if q == rank:
            for kind, fields in _RECORDS:
                emit(kind, **fields)
        hvd.allreduce(torch.zeros(1), name=f"turn.{q}")
        time.sleep(0.2)  # the launcher drains this rank's output before the next writes


def data(rank, n, salt=0):
    return ((np.arange(n, dtype=np.int64) * 7 + rank * 13 + salt) % 11 - 5).astype(np.float32)


def set_shapes(size):
    """Distinct proper subsets: one rank, ends, evens (non-contiguous from 3 ranks), tail,
    head; they overlap."""
    evens = list(range(0, size, 2))
    shapes = []
    for s in ([size - 1], [0, size - 1], evens, list(range(1, size)), [0, 1]):
        s = sorted(set(s))
        if s not in shapes and len(s) < size:
            shapes.append(s)
    return shapes


class Checker:
    def __init__(self, rank):
        self.rank = rank

    def check(self, name, got, want):
        got, want = np.asarray(got), np.asarray(want)
        ok = got.shape == want.shape and np.allclose(got, want, rtol=1e-6, atol=1e-6)
        record("check", name=name, ok=bool(ok), detail="" if ok else f"got {got.ravel()[:8]} want {want.ravel()[:8]}")
        record("outcome", name=name, value=digest(np.round(got.astype(np.float64), 5)))

    def outcome(self, name, fn):
        """fn()'s exception type (and text, for the log), or 'ok'."""
        try:
            fn()
            value, text = "ok", ""
        except Exception as e:  # noqa: BLE001 - the type is what is compared
            value, text = type(e).__name__, str(e)
        record("outcome", name=name, value=value, text=text)
        return value


# --------------------------------------------------------------------------- the calls


def t(x):
    return torch.from_numpy(np.ascontiguousarray(x))


_COUNTS = {}


def nm(op, ps):
    """A name for every call: Horovod's automatic names count calls per process, so they
    differ between the members of a set once ranks have called on different sets."""
    key = (op, tuple(ps.ranks) if ps is not None else ())
    _COUNTS[key] = _COUNTS.get(key, 0) + 1
    return f"{op}.{'-'.join(map(str, key[1]))}.{_COUNTS[key]}"


class TorchCalls:
    """Every collective through the Horovod torch API; numpy in, numpy out."""

    label = "torch"

    def allreduce(self, x, ps, op):
        return hvd.allreduce(t(x), op=op, name=nm("ar", ps), process_set=ps).numpy()

    def allreduce_async_(self, x, ps):
        y = t(x.copy())
        return hvd.synchronize(hvd.allreduce_async_(y, op=hvd.Sum, name=nm("ar_", ps), process_set=ps)).numpy()

    def grouped(self, xs, ps):
        return [
            r.numpy() for r in hvd.grouped_allreduce([t(x) for x in xs], op=hvd.Sum, name=nm("gr", ps), process_set=ps)
        ]

    def allgather(self, x, ps):
        return hvd.allgather(t(x), name=nm("ag", ps), process_set=ps).numpy()

    def broadcast(self, x, root, ps):
        return hvd.broadcast(t(x), root, name=nm("bc", ps), process_set=ps).numpy()

    def alltoall(self, x, splits, ps):
        out, received = hvd.alltoall(
            t(x), splits=torch.tensor(splits, dtype=torch.int32), name=nm("a2a", ps), process_set=ps
        )
        return out.numpy(), received.numpy()

    def reducescatter(self, x, ps):
        return hvd.reducescatter(t(x), op=hvd.Sum, name=nm("rs", ps), process_set=ps).numpy()

    def barrier(self, ps):
        hvd.barrier(process_set=ps)

    def broadcast_object(self, obj, root, ps):
        return hvd.broadcast_object(obj, root, name=nm("bo", ps), process_set=ps)

    def allreduce_async(self, x, ps):
        return hvd.allreduce_async(t(x), op=hvd.Sum, name=nm("ara", ps), process_set=ps)

    def wait(self, h):
        return hvd.synchronize(h).numpy()


class PlainCalls:
    """The same through rdmacoll's plain API."""

    label = "plain"

    def __init__(self):
        import rdmacoll

        self.rc = rdmacoll

    def allreduce(self, x, ps, op):
        return self.rc.allreduce(x, op={hvd.Sum: self.rc.Sum, hvd.Average: self.rc.Average}[op], process_set=ps)

    def allreduce_async_(self, x, ps):
        y = x.copy()
        self.rc.synchronize(self.rc.allreduce_async(y, op=self.rc.Sum, out=y, process_set=ps))
        return y

    def grouped(self, xs, ps):
        return self.rc.grouped_allreduce(xs, op=self.rc.Sum, process_set=ps)

    def allgather(self, x, ps):
        return self.rc.allgather(x, process_set=ps)

    def broadcast(self, x, root, ps):
        return self.rc.broadcast(x, root, process_set=ps)

    def alltoall(self, x, splits, ps):
        return self.rc.alltoall(x, splits, return_received_splits=True, process_set=ps)

    def reducescatter(self, x, ps):
        return self.rc.reducescatter(x, op=self.rc.Sum, process_set=ps)

    def barrier(self, ps):
        self.rc.barrier(process_set=ps)
        self.rc.synchronize(self.rc.barrier_async(process_set=ps))

    def broadcast_object(self, obj, root, ps):
        return self.rc.broadcast_object(obj, root, process_set=ps)

    def allreduce_async(self, x, ps):
        return self.rc.allreduce_async(x, op=self.rc.Sum, process_set=ps)

    def wait(self, h):
        return self.rc.synchronize(h)


def collectives(ck, calls, ps, salt):
    """Every collective on ps (this rank a member), against references."""
    r, members = ck.rank, ps.ranks
    m, i = len(members), members.index(ck.rank)
    tag = f"{calls.label} {members}"
    for n in (1, 1000, 70001):
        ck.check(
            f"{tag} allreduce sum {n}",
            calls.allreduce(data(r, n, salt), ps, hvd.Sum),
            sum(data(q, n, salt) for q in members),
        )
        ck.check(
            f"{tag} allreduce average {n}",
            calls.allreduce(data(r, n, salt + 1), ps, hvd.Average),
            sum(data(q, n, salt + 1) for q in members) / m,
        )
    ck.check(
        f"{tag} allreduce_async_",
        calls.allreduce_async_(data(r, 33, salt), ps),
        sum(data(q, 33, salt) for q in members),
    )
    got = calls.grouped([data(r, 5, salt), data(r, 7, salt + 2)], ps)
    ck.check(f"{tag} grouped 0", got[0], sum(data(q, 5, salt) for q in members))
    ck.check(f"{tag} grouped 1", got[1], sum(data(q, 7, salt + 2) for q in members))
    ck.check(
        f"{tag} allgather",
        calls.allgather(data(r, 3 * (r + 1), salt).reshape(r + 1, 3), ps),
        np.concatenate([data(q, 3 * (q + 1), salt).reshape(q + 1, 3) for q in members]),
    )
    root = members[-1]
    ck.check(f"{tag} broadcast from {root}", calls.broadcast(data(r, 50, salt), root, ps), data(root, 50, salt))

    def splits_of(k):
        return [(k + j) % 2 + 1 for j in range(m)]

    def rows_of(k):
        q = members[k]
        return data(q, 2 * sum(splits_of(k)), salt).reshape(-1, 2)

    out, received = calls.alltoall(rows_of(i), splits_of(i), ps)
    blocks = [rows_of(k)[sum(splits_of(k)[:i]) : sum(splits_of(k)[: i + 1])] for k in range(m)]
    ck.check(f"{tag} alltoall", out, np.concatenate(blocks))
    ck.check(f"{tag} alltoall received", received, [splits_of(k)[i] for k in range(m)])
    rows = 2 * m + 1
    total = sum(data(q, rows * 2, salt).reshape(rows, 2) for q in members)
    start = i * (rows // m) + min(i, rows % m)
    mine = rows // m + (1 if i < rows % m else 0)
    ck.check(
        f"{tag} reducescatter",
        calls.reducescatter(data(r, rows * 2, salt).reshape(rows, 2), ps),
        total[start : start + mine],
    )
    calls.barrier(ps)
    got = calls.broadcast_object({"from": r, "salt": salt}, root, ps)
    ck.check(f"{tag} broadcast_object", [got["from"], got["salt"]], [root, salt])


def refused(ck, calls, ps, label):
    """Every collective on ps from a rank outside it: the exception type of each."""
    tag = f"{label} {calls.label} {ps.ranks} outside"
    x = data(ck.rank, 4)
    ck.outcome(f"{tag} allreduce", lambda: calls.allreduce(x, ps, hvd.Sum))
    ck.outcome(f"{tag} allreduce_async_", lambda: calls.allreduce_async_(x, ps))
    ck.outcome(f"{tag} grouped", lambda: calls.grouped([x], ps))
    ck.outcome(f"{tag} allgather", lambda: calls.allgather(x, ps))
    ck.outcome(f"{tag} broadcast", lambda: calls.broadcast(x, ps.ranks[0], ps))
    ck.outcome(f"{tag} alltoall", lambda: calls.alltoall(x, [len(x)] + [0] * (len(ps.ranks) - 1), ps))
    ck.outcome(f"{tag} reducescatter", lambda: calls.reducescatter(x, ps))
    ck.outcome(f"{tag} barrier", lambda: calls.barrier(ps))
    ck.outcome(f"{tag} broadcast_object", lambda: calls.broadcast_object(1, ps.ranks[0], ps))
    ck.outcome(f"{tag} rank()", ps.rank)


def describe(ck, ps, label):
    record("outcome", name=f"{label} {ps.ranks} id/size/included", value=[ps.process_set_id, ps.size(), ps.included()])
    if ps.included():
        record("outcome", name=f"{label} {ps.ranks} rank", value=ps.rank())
        ck.check(f"{label} {ps.ranks} rank", ps.rank(), ps.ranks.index(ck.rank))


def optimizer_case(ck, ps):
    """DistributedOptimizer(process_set=ps): members step with the set's average gradient,
    the others with their own (as Horovod)."""

    def model():
        torch.manual_seed(3)
        return torch.nn.Linear(6, 4)

    def grads(q):
        net = model()
        x = t(data(q, 30).reshape(5, 6))
        net(x).pow(2).sum().backward()
        return [p.grad.detach().numpy().copy() for p in net.parameters()], [
            p.detach().numpy().copy() for p in net.parameters()
        ]

    net = model()
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(net.parameters(), lr=0.01), named_parameters=net.named_parameters(), process_set=ps
    )
    x = t(data(ck.rank, 30).reshape(5, 6))
    for _ in range(1):
        opt.zero_grad()
        net(x).pow(2).sum().backward()
        opt.step()
    contributors = ps.ranks if ck.rank in ps.ranks else [ck.rank]
    start = grads(ck.rank)[1]
    avg = [sum(grads(q)[0][k] for q in contributors) / len(contributors) for k in range(len(start))]
    for k, p in enumerate(net.parameters()):
        ck.check(f"optimizer {ps.ranks} param {k}", p.detach().numpy(), start[k] - 0.01 * avg[k])


def broadcast_state_case(ck, ps):
    """broadcast_parameters / broadcast_optimizer_state / allgather_object with process_set=
    (rdmacoll's; Horovod 0.28.1's take none): every member ends with the root's."""
    root = ps.ranks[-1]
    torch.manual_seed(100 + ck.rank)
    net = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    net(t(data(ck.rank, 8).reshape(2, 4))).sum().backward()
    opt.step()
    if not ps.included():
        ck.outcome(
            f"broadcast_parameters {ps.ranks} outside",
            lambda: hvd.broadcast_parameters(net.state_dict(), root, process_set=ps),
        )
        return
    hvd.broadcast_parameters(net.state_dict(), root_rank=root, process_set=ps)
    hvd.broadcast_optimizer_state(opt, root_rank=root, process_set=ps)
    mine = [p.detach().numpy().copy() for p in net.parameters()]
    mine += [opt.state[p]["momentum_buffer"].numpy().copy() for p in net.parameters()]
    every = hvd.allgather_object(mine, process_set=ps)
    ck.check(f"allgather_object {ps.ranks} length", len(every), len(ps.ranks))
    want = every[ps.ranks.index(root)]  # (the ranks started from different seeds and data)
    for q, theirs in zip(ps.ranks, every):
        for k, (a, b) in enumerate(zip(theirs, want)):
            ck.check(f"broadcast state {ps.ranks} rank {q} tensor {k}", a, b)


def static(ck, size):
    shapes = set_shapes(size)
    sets = [hvd.ProcessSet(s) for s in shapes]
    duplicate = hvd.ProcessSet(shapes[0])
    hvd.init(process_sets=sets)
    for ps in sets:
        describe(ck, ps, "static")
    ck.outcome("static global rank/size", lambda: (hvd.global_process_set.rank(), hvd.global_process_set.size()))
    record("outcome", name="static global ranks", value=hvd.global_process_set.ranks)
    every = [TorchCalls()] + ([] if UNDER_HOROVOD else [PlainCalls()])
    for salt, ps in enumerate(sets):
        for calls in every:
            if ps.included():
                collectives(ck, calls, ps, salt)
            else:
                refused(ck, calls, ps, "static")
        # the world between the sets' calls
        ck.check(
            f"world after {ps.ranks}",
            hvd.allreduce(t(data(ck.rank, 9)), op=hvd.Sum, name=nm("w", None)).numpy(),
            sum(data(q, 9) for q in range(size)),
        )
    # in flight together: every set of this rank's and the world's, waited in reverse order
    for calls in every:
        mine = [
            (ps, calls.allreduce_async(data(ck.rank, 4000, 50 + k), ps)) for k, ps in enumerate(sets) if ps.included()
        ]
        hw = calls.allreduce_async(data(ck.rank, 4000, 99), hvd.global_process_set)
        ck.check(f"{calls.label} world in flight", calls.wait(hw), sum(data(q, 4000, 99) for q in range(size)))
        for ps, h in reversed(mine):
            k = sets.index(ps)
            ck.check(f"{calls.label} {ps.ranks} in flight", calls.wait(h), sum(data(q, 4000, 50 + k) for q in ps.ranks))
    for ps in sets[:2]:
        optimizer_case(ck, ps)
        if not UNDER_HOROVOD:
            broadcast_state_case(ck, ps)
    ck.outcome("static add refused", lambda: hvd.add_process_set([0]))
    ck.outcome("static remove refused", lambda: hvd.remove_process_set(sets[-1]))
    record("outcome", name="static remove invalidates", value=sets[-1].process_set_id)
    record("outcome", name="static duplicate object unregistered", value=duplicate.process_set_id)
    record("outcome", name="static remove global", value=hvd.remove_process_set(hvd.global_process_set))


def dynamic(ck, size, how):
    if how == "dynamic":
        hvd.init(process_sets="dynamic")
    else:
        hvd.init()
    every = [TorchCalls()] + ([] if UNDER_HOROVOD else [PlainCalls()])
    ends = hvd.add_process_set([size - 1, 0] if size > 2 else [0])  # proper subsets only
    record("outcome", name="dynamic ends", value=[ends.ranks, ends.process_set_id])
    tail = hvd.ProcessSet(list(range(1, size)))
    h = {c.label: c.allreduce_async(data(ck.rank, 3000, 7), ends) for c in every if ends.included()}
    # added while an operation of another set is in flight
    got = hvd.add_process_set(tail)
    record("outcome", name="dynamic tail", value=[got is tail, tail.process_set_id])
    for c in every:
        if ends.included():
            ck.check(
                f"{c.label} ends in flight across add", c.wait(h[c.label]), sum(data(q, 3000, 7) for q in ends.ranks)
            )
    for calls in every:
        for salt, ps in enumerate((ends, tail)):
            if ps.included():
                collectives(ck, calls, ps, salt)
            else:
                refused(ck, calls, ps, "dynamic")
    describe(ck, ends, "dynamic")
    describe(ck, tail, "dynamic")
    ck.outcome("dynamic duplicate add", lambda: hvd.add_process_set(list(reversed(ends.ranks))))
    ck.outcome("dynamic duplicate of global", lambda: hvd.add_process_set(list(range(size))))
    # remove while the other set has an operation in flight
    h = {c.label: c.allreduce_async(data(ck.rank, 3000, 8), tail) for c in every if tail.included()}
    record("outcome", name="dynamic remove ends", value=hvd.remove_process_set(ends))
    record("outcome", name="dynamic removed id", value=ends.process_set_id)
    for c in every:
        if tail.included():
            ck.check(
                f"{c.label} tail in flight across remove", c.wait(h[c.label]), sum(data(q, 3000, 8) for q in tail.ranks)
            )
    record("outcome", name="dynamic remove again", value=hvd.remove_process_set(ends))
    record("outcome", name="dynamic remove global", value=hvd.remove_process_set(hvd.global_process_set))
    one = hvd.add_process_set([size - 1] if size > 2 else [0])
    record("outcome", name="dynamic reused id", value=one.process_set_id)
    for calls in every:
        if one.included():
            collectives(ck, calls, one, 5)
        if tail.included():
            collectives(ck, calls, tail, 6)
    ck.check(
        "world after",
        hvd.allreduce(t(data(ck.rank, 9)), op=hvd.Sum, name=nm("w", None)).numpy(),
        sum(data(q, 9) for q in range(size)),
    )
    record("outcome", name="dynamic remove one", value=hvd.remove_process_set(one))
    record("outcome", name="dynamic remove tail", value=hvd.remove_process_set(tail))


def run():
    how = sys.argv[1]
    size = int(os.environ.get("PMI_SIZE") or os.environ.get("OMPI_COMM_WORLD_SIZE"))
    rank = int(os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK"))
    set_rank(rank)
    ck = Checker(rank)
    ck.outcome("ProcessSet of non-integers", lambda: hvd.ProcessSet([0, 1.5]))
    record(
        "outcome",
        name="ProcessSet sorted, unregistered",
        value=[hvd.ProcessSet([1, 0]).ranks, hvd.ProcessSet([1, 0]).size(), hvd.ProcessSet([1, 0]).rank()],
    )
    record("outcome", name="ProcessSet identity", value=hvd.ProcessSet([0]) == hvd.ProcessSet([0]))
    if how == "static":
        static(ck, size)
    else:
        dynamic(ck, size, how)
    # (also keeps every rank in until all are done: Horovod's shutdown does not wait for
    # the other ranks, whose operations would then fail)
    flush_records(rank, size)
    hvd.shutdown()
    emit("done")


if __name__ == "__main__":
    main(run)
