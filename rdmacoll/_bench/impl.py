"""The interface every benchmarked implementation offers (rdmacoll here, the comparison
peers in rdmacoll/_bench/peers.py), and rdmacoll's own.

An implementation prepares one collective at one size from this rank's send buffer and
returns a Prepared (rdmacoll's prepare also takes broadcast's root; the peers' time
root 0 only): run() performs one call (the part that is timed), reset() restores
what an in-place call overwrote (untimed, before every call), result() is this rank's
output after the last call (checked against the NumPy reference).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

import rdmacoll as rc


class Prepared(NamedTuple):
    run: Callable[[], object]
    reset: Callable[[], None]
    result: Callable[[], object]


def nothing() -> None:
    return None


def restore(buf: np.ndarray, src: np.ndarray) -> Callable[[], None]:
    def reset() -> None:
        buf[...] = src

    return reset


class Rdmacoll:
    name = "rdmacoll"

    # Collectives whose algorithm the core reports in last_algorithm (all of them).
    REPORTED = ("allreduce", "allgather", "broadcast", "reducescatter", "alltoall")

    def __init__(self, memory: str = "user"):
        self.memory = memory
        self.collective = None

    @property
    def transport(self) -> str:
        return rc._session.current().comm.transport

    @property
    def algo(self) -> str:
        """The algorithm of the last call, as the core reports it ("-" where it does not)."""
        if self.collective not in self.REPORTED:
            return "-"
        return rc._session.current().comm.last_algorithm or "-"

    def supports(self, collective: str, dtype: np.dtype, op: str) -> str | None:
        return None

    def _array(self, src: np.ndarray) -> np.ndarray:
        a = rc.empty(src.shape, src.dtype) if self.memory == "empty" else np.empty_like(src)
        a[...] = src
        return a

    def prepare(self, collective: str, send: np.ndarray, op: str, inplace: bool, root: int = 0) -> Prepared:
        self.collective = collective
        x = self._array(send)
        rop = getattr(rc, op)
        if collective in ("allreduce", "broadcast"):
            out = x if inplace else self._array(np.zeros_like(send))
            reset = restore(x, send) if inplace else nothing
            if collective == "allreduce":
                return Prepared(lambda: rc.allreduce(x, op=rop, out=out), reset, lambda: out)
            return Prepared(lambda: rc.broadcast(x, root, out=out), reset, lambda: out)
        last = [None]
        call = {
            "allgather": lambda: rc.allgather(x),
            "reducescatter": lambda: rc.reducescatter(x, op=rop),
            "alltoall": lambda: rc.alltoall(x),
        }[collective]

        def run():
            last[0] = call()

        return Prepared(run, nothing, lambda: last[0])

    def close(self) -> None:
        pass
