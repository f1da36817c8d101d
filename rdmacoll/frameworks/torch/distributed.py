"""rdmacoll as a torch.distributed backend, for DistributedDataParallel, FSDP and every
torch.distributed collective on CPU and CUDA tensors:

    torch.distributed.init_process_group("rdmacoll") # under torchrun, srun or mpirun

(torch's plugin hook registers the backend at `import torch`: rdmacoll_torch_plugin, whose
creator imports this module; importing it registers it too, where the hook is off.)

Pure Python over the core (nothing compiled against torch): a ProcessGroup subclass
whose collectives are rdmacoll's, queued in call order on rdmacoll's executor. Every op
returns a Work whose wait() and get_future() behave as gloo's: the future completes from
the thread that finished the operation, so DDP's reducer and comm hooks chain on it.

The default group joins the job through the store torch gives the backend (torchrun's
agent store, or the one passed to init_process_group): no MPI needed. Groups made by
dist.new_group(ranks) are sub-communicators over the default group's connections
(rdmacoll's process sets use the same mechanism); their members exchange their control
regions through the group's own store. Errors raise torch.distributed.DistBackendError
with rdmacoll's message; a mismatch or a dead peer raises on every rank.
"""

from __future__ import annotations

import threading

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed import DistBackendError, ReduceOp

import rdmacoll as rc
from rdmacoll import RdmacollError
from rdmacoll._session import Session
from rdmacoll.bootstrap import bootstrap
from rdmacoll.bootstrap.store import StoreExchange

from rdmacoll import _device

from ._tensors import as_numpy, as_torch, check_tensor, device_array

BACKEND = "rdmacoll"

_OPS = {
    ReduceOp.RedOpType.SUM: rc.Sum,
    ReduceOp.RedOpType.AVG: rc.Average,
    ReduceOp.RedOpType.PRODUCT: rc.Product,
    ReduceOp.RedOpType.MIN: rc.Min,
    ReduceOp.RedOpType.MAX: rc.Max,
}


def _op_of(reduce_op, tensor):
    """(rdmacoll op, premultiply factor or None) for a torch ReduceOp."""
    kind = reduce_op.op if hasattr(reduce_op, "op") else reduce_op
    if kind == ReduceOp.RedOpType.PREMUL_SUM:
        return rc.Sum, float(reduce_op.factor)
    if kind not in _OPS:
        raise ValueError(f"rdmacoll backend: {kind} is not supported (SUM, AVG, PRODUCT, MIN, MAX, PREMUL_SUM)")
    if kind == ReduceOp.RedOpType.AVG and not tensor.dtype.is_floating_point:
        raise ValueError(f"rdmacoll backend: ReduceOp.AVG on {tensor.dtype} tensors: use SUM and divide")
    return _OPS[kind], None


def _view(t, what):
    """A flat NumPy view of a contiguous CPU tensor (the memory rdmacoll reduces in)."""
    check_tensor(t, what)
    if not t.is_contiguous():
        raise ValueError(f"rdmacoll backend: {what} is not contiguous")
    return as_numpy(t).reshape(-1)


def _cuda(t):
    return t.device.type == "cuda"


def _map(f, obj):
    """f applied to every tensor of obj (a tensor, or lists and tuples of them)."""
    if isinstance(obj, (list, tuple)):
        return type(obj)(_map(f, o) for o in obj)
    return f(obj) if isinstance(obj, torch.Tensor) else obj


def _tensors_of(obj):
    out = []
    _map(out.append, obj)
    return out


def _value(fut):
    return fut.value()  # (raises the error a failed operation's future holds)


class _Work(dist.Work):
    """An operation in flight: core handles, then `finish` (copies into the caller's
    tensors) and the future's result, from whichever thread completes the last handle.

    A failure must reach C++ as a failed future. torch.futures.Future.set_exception does
    not make one: it completes the future with the exception object as its value (Python
    unwraps it), and DDP's reducer, reading a bucket's result in C++, takes that value for
    tensors (it found none and read past the end: SIGSEGV in parseCppCommHookResult, where
    gloo raises). The future handed out (get_future) is therefore a continuation of the
    one this work completes: a callback that raises fails it in C++ (Future.then), so DDP's
    backward() raises RuntimeError "... DistBackendError: <rdmacoll's message>" as with
    gloo, and Python callers of wait() and value() get the error as well. wait() raises
    the DistBackendError itself."""

    def __init__(self, handles, finish, result):
        super().__init__()
        self._handles = list(handles)
        self._finish = finish
        self._result = result
        self._done = torch.futures.Future()  # completed here, as set_exception/set_result
        self._fut = self._done.then(_value)  # what callers get: failed in C++ on an error
        self._error = None
        self._completing = False  # set (with the GIL) by the one thread that completes it
        self._waiters = set()  # threads inside wait(): they complete it themselves
        if not self._handles:
            self._complete()
        else:
            self._handles[-1].add_done_callback(lambda _h: self._done_callback())

    def _done_callback(self):
        # A thread waiting in wait() can run the last operation itself and so call this
        # from inside a handle's wait: it completes the work when that returns.
        if threading.get_ident() not in self._waiters:
            self._complete()

    def _complete(self):
        # Operations run in the order they were queued: the last one done means all are.
        if self._completing:
            return  # another thread completes it (wait() then waits for the future)
        self._completing = True
        try:
            for h in self._handles:
                h.wait()
            if self._finish is not None:
                self._finish()
        except RdmacollError as e:
            self._error = DistBackendError(str(e))
        except Exception as e:  # noqa: BLE001 - surfaces through the future, like gloo's
            self._error = e
        if self._error is not None:
            self._done.set_exception(self._error)
        else:
            self._done.set_result(self._result)

    def wait(self, timeout=None):
        me = threading.get_ident()
        self._waiters.add(me)
        try:
            for h in self._handles:  # the caller runs queued work itself rather than waiting
                try:
                    h.wait()
                except RdmacollError:
                    break  # raised below, once, as the future's error
        finally:
            self._waiters.discard(me)
        self._complete()
        # The continuation completes in the thread that completed this work, after _done's
        # waiters wake: wait for it too, so that get_future().value() is ready on return.
        try:
            self._fut.wait()
        except Exception:  # noqa: BLE001 - the continuation's copy of self._error, raised below
            pass
        if self._error is not None:
            raise self._error
        return True

    def is_completed(self):
        return self._fut.done()

    def is_success(self):
        return self._fut.done() and self._error is None

    def exception(self):
        return self._error

    def get_future(self):
        return self._fut

    def result(self):
        self.wait()
        return self._result if isinstance(self._result, list) else [self._result]

    def synchronize(self):
        self.wait()


class ProcessGroupRdmacoll(dist.ProcessGroup):
    """A torch.distributed process group over an rdmacoll communicator."""

    def __init__(self, rank: int, size: int, comm, session, name: str):
        super().__init__(rank, size)
        self._rank, self._size = rank, size
        self._comm = comm  # the core communicator of this group
        self._session = session  # the session (not rdmacoll's current one) whose connections it uses
        self._name = name  # torch's name of the group (DeviceMesh, FSDP look groups up by it)

    # ------------------------------------------------------------------ identity
    def getBackendName(self):
        return BACKEND

    def size(self):
        return self._size

    def rank(self):
        return self._rank

    @property
    def group_name(self):
        return self._name

    @property
    def group_desc(self):
        return self._name

    def __repr__(self):
        return f"ProcessGroupRdmacoll(rank={self._rank}, size={self._size}, name={self._name!r})"

    def shutdown(self):
        if self._comm is not None:
            if self._comm is self._session.comm:
                # the family's own communicator: its session ends with it (_create starts a
                # new family at the next group over every rank)
                self._session.close(wait=False)
            else:
                self._comm.close()
            self._comm = None

    def abort(self):
        self.shutdown()

    def _c(self):
        if self._comm is None:
            raise DistBackendError("rdmacoll backend: the process group was shut down")
        return self._comm

    def _run(self, submit):
        try:
            return submit(self._c())
        except RdmacollError as e:
            raise DistBackendError(str(e)) from None

    def _staged(self, method, outputs, inputs, *rest):
        """method (a collective of this class on CPU tensors) on host copies of CUDA tensors
        (one copy per tensor: an output that is also an input stays one), the outputs
        copied back to their devices when the work completes. Allreduce and broadcast do
        not come here: the core stages them in its pipeline (../../_device.py)."""
        copies = {}

        def host(t):
            if not _cuda(t):
                return t
            if id(t) not in copies:
                copies[id(t)] = (t, t.detach().cpu())
            return copies[id(t)][1]

        work = method(_map(host, outputs), _map(host, inputs), *rest)
        back = [copies[id(t)] for t in _tensors_of(outputs) if id(t) in copies]

        def finish():
            if work._finish is not None:
                work._finish()  # (the inner work may run it too: the same copies, twice)
            for t, h in back:
                t.detach().copy_(h)
            for device in {t.device for t, _ in back}:  # done before the work is (any stream may read them)
                torch.cuda.current_stream(device).synchronize()

        return _Work(work._handles, finish, outputs)

    # ------------------------------------------------------------------ reductions
    def _allreduce_one(self, c, t, opts_op):
        op, factor = _op_of(opts_op, t)
        if _cuda(t):
            check_tensor(t, "allreduce tensor")
            if not t.is_contiguous():
                raise ValueError("rdmacoll backend: allreduce tensor is not contiguous")
            if factor is not None:
                t.mul_(factor)
            d = device_array(t)
            return _device.done(_device.allreduce(c, d, d, op, None))
        x = _view(t, "allreduce tensor")
        if factor is not None:
            t.mul_(factor)
        return c.allreduce_async(x, x, op, None)

    def allreduce(self, tensors, opts=None):
        op = opts.reduceOp if opts is not None else ReduceOp.SUM
        return _Work(self._run(lambda c: [self._allreduce_one(c, t, op) for t in tensors]), None, tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        if any(_cuda(t) for t in tensors):
            return self._staged(lambda o, i: self.allreduce_coalesced(i, opts), tensors, tensors)
        op = opts.reduceOp if opts is not None else ReduceOp.SUM
        if not tensors:
            return _Work([], None, tensors)
        rop, factor = _op_of(op, tensors[0])
        if factor is not None:
            for t in tensors:
                t.mul_(factor)
        views = [_view(t, "allreduce_coalesced tensor") for t in tensors]
        handle = self._run(lambda c: rc.Handle(_grouped(c, views, rop)))
        return _Work([handle], None, tensors)

    def reduce(self, tensors, opts=None):
        if any(_cuda(t) for t in tensors):
            return self._staged(lambda o, i: self.reduce(i, opts), tensors, tensors)
        t = tensors[0]
        root = opts.rootRank
        op, factor = _op_of(opts.reduceOp, t)
        x = _view(t, "reduce tensor")
        src = x * np.asarray(factor, x.dtype) if factor is not None else x
        h = self._run(lambda c: c.allreduce_async(src, None, op, None))

        def finish():
            if self._rank == root:
                np.copyto(x, h.wait())

        return _Work([h], finish, tensors)

    def reduce_scatter(self, output_tensors, input_lists, opts=None):
        if any(_cuda(t) for t in _tensors_of([output_tensors, input_lists])):
            return self._staged(lambda o, i: self.reduce_scatter(o, i, opts), output_tensors, input_lists)
        out, inputs = output_tensors[0], input_lists[0]
        if len(inputs) != self._size:
            raise ValueError(f"rdmacoll backend: reduce_scatter needs {self._size} inputs, got {len(inputs)}")
        stacked = torch.stack([i.detach().reshape(-1) for i in inputs])  # one row per rank
        return self._reduce_scatter_rows(out, stacked, opts)

    def reduce_scatter_single(self, output, input, opts=None):
        if _cuda(output) or _cuda(input):
            return self._staged(lambda o, i: self.reduce_scatter_single(o, i, opts), output, input)
        if input.numel() != output.numel() * self._size:
            raise ValueError(
                f"rdmacoll backend: reduce_scatter_tensor input has {input.numel()} elements, "
                f"expected {self._size} x {output.numel()}"
            )
        return self._reduce_scatter_rows(output, input.reshape(self._size, -1), opts)

    def _reduce_scatter_rows(self, out, rows, opts):
        op, factor = _op_of(opts.reduceOp if opts is not None else ReduceOp.SUM, out)
        x = _view(rows if rows.is_contiguous() else rows.contiguous(), "reduce_scatter input")
        x = x.reshape(self._size, -1)
        if factor is not None:
            x = x * np.asarray(factor, x.dtype)
        h = self._run(lambda c: c.reducescatter_async(x, op, None))
        target = _view(out, "reduce_scatter output")
        return _Work([h], lambda: np.copyto(target, h.wait().reshape(-1)), [out])

    # ------------------------------------------------------------------ data movement
    def broadcast(self, tensors, opts=None):
        root = opts.rootRank if opts is not None else 0

        def one(c, t):
            if not _cuda(t):
                v = _view(t, "broadcast tensor")
                return c.broadcast_async(v, root, v, None)
            check_tensor(t, "broadcast tensor")
            if not t.is_contiguous():
                raise ValueError("rdmacoll backend: broadcast tensor is not contiguous")
            d = device_array(t)
            return _device.done(_device.broadcast(c, d, root, d, None))

        return _Work(self._run(lambda c: [one(c, t) for t in tensors]), None, tensors)

    def allgather(self, output_lists, input_tensors, opts=None):
        if any(_cuda(t) for t in _tensors_of([output_lists, input_tensors])):
            return self._staged(lambda o, i: self.allgather(o, i, opts), output_lists, input_tensors)
        outs, t = output_lists[0], input_tensors[0]
        if len(outs) != self._size:
            raise ValueError(f"rdmacoll backend: all_gather needs {self._size} output tensors, got {len(outs)}")
        x = _view(t, "all_gather input").reshape(1, -1)
        h = self._run(lambda c: c.allgather_async(x, None))

        def finish():
            rows = h.wait()
            for q, o in enumerate(outs):
                o.detach().reshape(-1).copy_(as_torch(rows[q]))

        return _Work([h], finish, outs)

    def all_gather_single(self, output, input, opts=None):
        if _cuda(output) or _cuda(input):
            return self._staged(lambda o, i: self.all_gather_single(o, i, opts), output, input)
        if output.numel() != input.numel() * self._size:
            raise ValueError(
                f"rdmacoll backend: all_gather_into_tensor output has {output.numel()} elements, "
                f"expected {self._size} x {input.numel()}"
            )
        x = _view(input, "all_gather_into_tensor input").reshape(1, -1)
        target = _view(output, "all_gather_into_tensor output")
        h = self._run(lambda c: c.allgather_async(x, None))
        return _Work([h], lambda: np.copyto(target, h.wait().reshape(-1)), [output])

    def allgather_coalesced(self, output_lists, input_tensors, opts=None):
        works = [self.allgather([outs], [t], opts) for outs, t in zip(output_lists, input_tensors)]
        for w in works[:-1]:
            w.wait()
        return works[-1] if works else _Work([], None, output_lists)

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        works = [self.all_gather_single(o, i, opts) for o, i in zip(outputs, inputs)]
        return _Work([h for w in works for h in w._handles], lambda: [w._complete() for w in works], outputs)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        works = [self.reduce_scatter_single(o, i, opts) for o, i in zip(outputs, inputs)]
        return _Work([h for w in works for h in w._handles], lambda: [w._complete() for w in works], outputs)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        if _cuda(output) or _cuda(input):
            return self._staged(
                lambda o, i: self.all_to_all_single(o, i, output_split_sizes, input_split_sizes, opts), output, input
            )
        p = self._size
        rows_in = input.shape[0] if input.dim() else 1
        splits = list(input_split_sizes) if input_split_sizes else None
        if splits is None and rows_in % p:
            raise ValueError(
                f"rdmacoll backend: all_to_all_single: dim 0 ({rows_in}) is not divisible by the "
                f"group size ({p}); pass input_split_sizes"
            )
        x = _view(input, "all_to_all_single input").reshape(rows_in, -1)
        target = _view(output, "all_to_all_single output")
        h = self._run(lambda c: c.alltoall_async(x, splits, None))

        def finish():
            data, received = h.wait()
            want = list(output_split_sizes) if output_split_sizes else [output.shape[0] // p] * p
            if list(received) != want:
                raise ValueError(
                    f"rdmacoll backend: all_to_all_single received rows {list(received)} but "
                    f"output_split_sizes says {want}"
                )
            np.copyto(target, data.reshape(-1))

        return _Work([h], finish, [output])

    def alltoall(self, output_tensors, input_tensors, opts=None):
        if any(_cuda(t) for t in _tensors_of([output_tensors, input_tensors])):
            return self._staged(lambda o, i: self.alltoall(o, i, opts), output_tensors, input_tensors)
        # Tensors of any shapes: moved as bytes, one byte per row.
        inputs = [i.detach().contiguous() for i in input_tensors]
        data = (
            np.concatenate([as_numpy(i).reshape(-1).view(np.uint8) for i in inputs])
            if inputs
            else np.empty(0, np.uint8)
        )
        splits = [i.numel() * i.element_size() for i in inputs]
        h = self._run(lambda c: c.alltoall_async(data, splits, None))

        def finish():
            got, received = h.wait()
            off = 0
            for o, n in zip(output_tensors, received):
                if n != o.numel() * o.element_size():
                    raise ValueError(
                        f"rdmacoll backend: alltoall received {n} bytes for an output of {o.numel() * o.element_size()}"
                    )
                o.detach().reshape(-1).view(torch.uint8).copy_(torch.from_numpy(got[off : off + n]))
                off += n

        return _Work([h], finish, output_tensors)

    def gather(self, output_lists, input_tensors, opts=None):
        if any(_cuda(t) for t in _tensors_of([output_lists, input_tensors])):
            return self._staged(lambda o, i: self.gather(o, i, opts), output_lists, input_tensors)
        root, t = opts.rootRank, input_tensors[0].detach().contiguous()
        x = as_numpy(t).reshape(-1).view(np.uint8)
        splits = [x.size if q == root else 0 for q in range(self._size)]
        h = self._run(lambda c: c.alltoall_async(x, splits, None))
        outs = output_lists[0] if output_lists else []

        def finish():
            got, _ = h.wait()
            if self._rank == root:
                for q, o in enumerate(outs):
                    o.detach().reshape(-1).view(torch.uint8).copy_(torch.from_numpy(got[q * x.size : (q + 1) * x.size]))

        return _Work([h], finish, outs)

    def scatter(self, output_tensors, input_lists, opts=None):
        if any(_cuda(t) for t in _tensors_of([output_tensors, input_lists])):
            return self._staged(lambda o, i: self.scatter(o, i, opts), output_tensors, input_lists)
        root, out = opts.rootRank, output_tensors[0]
        nbytes = out.numel() * out.element_size()
        if self._rank == root:
            parts = [i.detach().contiguous() for i in input_lists[0]]
            data = np.concatenate([as_numpy(i).reshape(-1).view(np.uint8) for i in parts])
            splits = [i.numel() * i.element_size() for i in parts]
        else:
            data, splits = np.empty(0, np.uint8), [0] * self._size
        h = self._run(lambda c: c.alltoall_async(data, splits, None))

        def finish():
            got, _ = h.wait()
            out.detach().reshape(-1).view(torch.uint8).copy_(torch.from_numpy(got[:nbytes]))

        return _Work([h], finish, [out])

    def barrier(self, opts=None):
        return _Work(self._run(lambda c: [c.barrier_async()]), None, [])

    # torch before 2.12 reaches these under their older names (all_gather_into_tensor,
    # reduce_scatter_tensor, all_to_all_single and the coalesced forms call them): without
    # them its ProcessGroup fell back to a per-device backend that a Python group has none of
    # ("No backend type associated with device type cuda", torch 2.11 on a GPU machine).
    def _allgather_base(self, output, input, opts=None):
        return self.all_gather_single(output, input, opts)

    def _reduce_scatter_base(self, output, input, opts=None):
        return self.reduce_scatter_single(output, input, opts)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        return self.all_to_all_single(output, input, output_split_sizes, input_split_sizes, opts)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        return self.all_gather_single_coalesced(outputs, inputs, opts)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        return self.reduce_scatter_single_coalesced(outputs, inputs, opts)

    # ------------------------------------------------------------------ point to point
    def send(self, tensors, dst, tag=0):
        raise NotImplementedError(
            "rdmacoll backend: send/recv are not supported (rdmacoll runs collectives only); "
            "use broadcast, scatter or all_to_all_single with splits, or a gloo group "
            "(dist.new_group(backend='gloo')) for point-to-point messages"
        )

    def recv(self, tensors, src, tag=0):
        self.send(tensors, src, tag)

    def recv_anysource(self, tensors, tag=0):
        self.send(tensors, -1, tag)


def _grouped(c, views, op):
    """Parts of an allreduce of several same-dtype arrays, in place (one fused buffer)."""
    fused = c.empty(sum(v.size for v in views), views[0].dtype)
    o = 0
    for v in views:
        fused[o : o + v.size] = v
        o += v.size
    h = c.allreduce_async(fused, fused, op, None)

    def back(_):
        o = 0
        for v in views:
            np.copyto(v, fused[o : o + v.size])
            o += v.size
        return views

    return rc.Handle(h, back)


class _Family:
    """The connections rdmacoll's groups of this process share: a session (rdmacoll._session,
    not the current one of rdmacoll.init()) over a bootstrap World made through the store
    of the first rdmacoll group (the default group, or a group over all ranks made with
    dist.new_group(backend="rdmacoll") beside another default backend), and the torch
    ranks of its members in its rank order."""

    def __init__(self, session, ranks):
        self.session, self.ranks = session, list(ranks)

    def members(self, ranks):
        missing = [g for g in ranks if g not in self.ranks]
        if missing:
            raise RdmacollError(
                f"ranks {missing} are not in the rdmacoll group its groups are split from (ranks {self.ranks})"
            )
        return [self.ranks.index(g) for g in ranks]


class _Families:
    """The family of this process, made by the first rdmacoll group (torch's plugin API
    is process-wide: so is this)."""

    current: _Family | None = None


def _create(opts, backend_options=None):
    store, rank, size = opts.store, opts.group_rank, opts.group_size
    ranks = list(opts.global_ranks_in_group) or list(range(size))  # (the default group passes none)
    try:
        family = _Families.current
        epoch = 1 if family is None else family.session.epoch + 1
        if family is not None and family.session.closed:
            # destroy_process_group() closed it with its groups: the next group over every
            # rank (init_process_group again, or new_group beside another default) starts anew
            family = None
        if family is None or not opts.global_ranks_in_group:
            world = bootstrap(exchange=StoreExchange(store, rank, size, prefix="rdmacoll/world/"))
            session = Session(world, epoch)
            _Families.current = _Family(session, ranks)
            return ProcessGroupRdmacoll(rank, size, session.comm, session, str(opts.group_id))
        ex = StoreExchange(store, rank, size, prefix="rdmacoll/group/")
        sub = family.session.split(family.members(ranks), ex.allgather)
        ex.barrier()
        return ProcessGroupRdmacoll(rank, size, sub, family.session, str(opts.group_id))
    except RdmacollError as e:
        raise DistBackendError(str(e)) from None


def _register():
    if BACKEND.upper() not in getattr(dist.Backend, "_plugins", {}):
        dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["cpu", "cuda"])


_register()
