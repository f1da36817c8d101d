"""The libraries rdmacoll-bench --compare runs beside rdmacoll, in the same processes:
MPI (mpi4py), torch.distributed with gloo, and Horovod.

Each peer offers the interface of rdmacoll/_bench/impl.py (supports, prepare -> Prepared,
close; name, algo and transport for the table). The framework and MPI imports happen
inside the constructors, so importing this module costs nothing.

Module boundaries (docs/design.md): frameworks (torch, horovod) are imported only inside
rdmacoll/frameworks/, and mpi4py only in rdmacoll/bootstrap/mpi.py (which starts
MPI-launched jobs), except here: MPI, torch.distributed and Horovod are peers being
measured, never a path rdmacoll's own collectives take.
"""

from __future__ import annotations

import datetime
import importlib.util
import socket

import numpy as np

import rdmacoll as rc
from .impl import Prepared, nothing, restore

_INSTALL = {
    "mpi": "pip install mpi4py",
    "gloo": "pip install torch",
    "horovod": "pip install horovod, built against your torch",
}
_MODULE = {"mpi": "mpi4py", "gloo": "torch", "horovod": "horovod"}


def missing(name: str) -> str | None:
    """Why peer `name` cannot run on this rank (None when it can)."""
    if importlib.util.find_spec(_MODULE[name]) is None:
        return f"{_MODULE[name]} is not installed ({_INSTALL[name]})"
    return None


def create(name: str):
    return {"mpi": MpiPeer, "gloo": GlooPeer, "horovod": HorovodPeer}[name]()


def _average(buf, nranks: int) -> None:
    np.multiply(buf, buf.dtype.type(1.0 / nranks), out=buf)


# --------------------------------------------------------------------------- MPI


def _mpi_name(version: str) -> str:
    """A short name of the MPI library for the algo column (it chooses inside)."""
    for prefix, name in (("Open MPI", "openmpi"), ("MPICH", "mpich"), ("Intel", "intelmpi"), ("MVAPICH", "mvapich")):
        if version.startswith(prefix):
            return name
    words = version.split()
    return words[0].lower() if words else "mpi"


class MpiPeer:
    """mpi4py on a duplicate of COMM_WORLD. Average is Sum then a scale (MPI has no
    average), both timed, as a user of MPI would run it."""

    name = "mpi"
    transport = "mpi"
    algo = "mpi"  # replaced by the library's name
    _OPS = {"Sum": "SUM", "Average": "SUM", "Min": "MIN", "Max": "MAX", "Product": "PROD"}

    def __init__(self):
        from mpi4py import MPI

        self.MPI = MPI
        self.comm = MPI.COMM_WORLD.Dup()
        self.nranks = self.comm.Get_size()
        self.algo = _mpi_name(MPI.Get_library_version())

    def supports(self, collective: str, dtype: np.dtype, op: str) -> str | None:
        if dtype.name == "bfloat16":
            return "MPI has no bfloat16"
        return None

    def prepare(self, collective: str, send: np.ndarray, op: str, inplace: bool) -> Prepared:
        MPI, comm, p = self.MPI, self.comm, self.nranks
        mop = getattr(MPI, self._OPS[op])
        avg = op == "Average"
        x = send.copy()
        if collective == "allreduce":
            if inplace:

                def run():
                    comm.Allreduce(MPI.IN_PLACE, x, op=mop)
                    if avg:
                        _average(x, p)

                return Prepared(run, restore(x, send), lambda: x)
            out = np.empty_like(x)

            def run():
                comm.Allreduce(x, out, op=mop)
                if avg:
                    _average(out, p)

            return Prepared(run, nothing, lambda: out)
        if collective == "broadcast":  # always in place in MPI
            return Prepared(lambda: comm.Bcast(x, root=0), restore(x, send), lambda: x)
        if collective == "allgather":
            out = np.empty(x.size * p, x.dtype)
            return Prepared(lambda: comm.Allgather(x, out), nothing, lambda: out)
        if collective == "reducescatter":
            out = np.empty(x.size // p, x.dtype)

            def run():
                comm.Reduce_scatter_block(x, out, op=mop)
                if avg:
                    _average(out, p)

            return Prepared(run, nothing, lambda: out)
        if collective == "alltoall":
            out = np.empty_like(x)
            return Prepared(lambda: comm.Alltoall(x, out), nothing, lambda: out)
        raise ValueError(collective)

    def close(self) -> None:
        self.comm.Free()


# --------------------------------------------------------------------------- torch


def _torch_view(torch, a: np.ndarray):
    """A torch tensor sharing a's memory (bfloat16 through its 16-bit pattern)."""
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _numpy_of(t, dtype: np.dtype) -> np.ndarray:
    import torch

    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(dtype)
    return t.numpy()


class GlooPeer:
    """torch.distributed with the gloo backend, over TCP on this host: rank 0 picks a free
    port and broadcasts it through rdmacoll. Tensors share the NumPy buffers. torch has
    no out-of-place allreduce: out of place copies then reduces in place (both timed)."""

    name = "gloo"
    transport = "tcp"
    algo = "gloo"

    def __init__(self):
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        self.nranks = rc.size()
        if rc.local_size() != rc.size():
            raise rc.RdmacollError("--compare gloo: this benchmark starts gloo on one host only")
        port = None
        if rc.rank() == 0:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
        port = rc.broadcast_object(port)
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rc.rank(),
            world_size=self.nranks,
            timeout=datetime.timedelta(seconds=120),
        )
        self._allgather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        self._reducescatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        R = dist.ReduceOp
        self._ops = {
            "Sum": R.SUM,
            "Average": getattr(R, "AVG", R.SUM),
            "Min": R.MIN,
            "Max": R.MAX,
            "Product": R.PRODUCT,
        }
        self._scale_after = not hasattr(R, "AVG")

    def supports(self, collective: str, dtype: np.dtype, op: str) -> str | None:
        return None

    def prepare(self, collective: str, send: np.ndarray, op: str, inplace: bool) -> Prepared:
        dist, p = self.dist, self.nranks
        top = self._ops[op]
        avg = op == "Average" and self._scale_after
        x = send.copy()
        tx = _torch_view(self.torch, x)
        if collective == "allreduce":
            if inplace:

                def run():
                    dist.all_reduce(tx, op=top)
                    if avg:
                        tx.div_(p)

                return Prepared(run, restore(x, send), lambda: x)
            out = np.empty_like(x)
            tout = _torch_view(self.torch, out)

            def run():
                tout.copy_(tx)
                dist.all_reduce(tout, op=top)
                if avg:
                    tout.div_(p)

            return Prepared(run, nothing, lambda: out)
        if collective == "broadcast":
            if inplace:
                return Prepared(lambda: dist.broadcast(tx, src=0), restore(x, send), lambda: x)
            out = np.empty_like(x)
            tout = _torch_view(self.torch, out)

            def run():
                tout.copy_(tx)
                dist.broadcast(tout, src=0)

            return Prepared(run, nothing, lambda: out)
        if collective == "allgather":
            out = np.empty(x.size * p, x.dtype)
            tout = _torch_view(self.torch, out)
            return Prepared(lambda: self._allgather(tout, tx), nothing, lambda: out)
        if collective == "reducescatter":
            out = np.empty(x.size // p, x.dtype)
            tout = _torch_view(self.torch, out)

            def run():
                self._reducescatter(tout, tx, op=top)
                if avg:
                    tout.div_(p)

            return Prepared(run, nothing, lambda: out)
        if collective == "alltoall":
            out = np.empty_like(x)
            tout = _torch_view(self.torch, out)
            return Prepared(lambda: dist.all_to_all_single(tout, tx), nothing, lambda: out)
        raise ValueError(collective)

    def close(self) -> None:
        self.dist.destroy_process_group()


class HorovodPeer:
    """horovod.torch (with its own MPI or gloo controller). Its results are new tensors,
    converted back to NumPy only for the check."""

    name = "horovod"
    transport = "horovod"
    algo = "horovod"

    def __init__(self):
        import horovod.torch as hvd
        import torch

        self.hvd, self.torch = hvd, torch
        hvd.init()
        self._ops = {
            "Sum": hvd.Sum,
            "Average": hvd.Average,
            "Min": getattr(hvd, "Min", None),
            "Max": getattr(hvd, "Max", None),
            "Product": getattr(hvd, "Product", None),
        }
        self._n = 0

    def supports(self, collective: str, dtype: np.dtype, op: str) -> str | None:
        if collective in ("allreduce", "reducescatter") and self._ops[op] is None:
            return f"this Horovod has no {op}"
        if collective == "reducescatter" and not hasattr(self.hvd, "reducescatter"):
            return "this Horovod has no reducescatter"
        return None

    def prepare(self, collective: str, send: np.ndarray, op: str, inplace: bool) -> Prepared:
        hvd = self.hvd
        self._n += 1
        name = f"rdmacoll-bench.{self._n}"  # Horovod matches calls across ranks by name
        x = send.copy()
        tx = _torch_view(self.torch, x)
        last = [tx]
        hop = self._ops[op]

        def result():
            return _numpy_of(last[0], send.dtype)

        if collective == "allreduce":
            return Prepared(lambda: hvd.allreduce_(tx, op=hop, name=name), restore(x, send), result)
        if collective == "broadcast":
            return Prepared(lambda: hvd.broadcast_(tx, root_rank=0, name=name), restore(x, send), result)
        call = {
            "allgather": lambda: hvd.allgather(tx, name=name),
            "reducescatter": lambda: hvd.reducescatter(tx, op=hop, name=name),
            "alltoall": lambda: hvd.alltoall(tx, name=name),
        }[collective]

        def run():
            last[0] = call()

        return Prepared(run, nothing, result)

    def close(self) -> None:
        self.hvd.shutdown()
