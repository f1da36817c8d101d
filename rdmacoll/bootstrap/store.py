"""torch's key-value store as a bootstrap (the only module besides the framework adapters
that imports torch, and only when the store bootstraps): the store torchrun's agent
already runs (or the one a torch.distributed backend is created with, or the one the
elastic driver hosts: bootstrap/elastic.py) moves bootstrap's few objects; no rendezvous
server of rdmacoll's own, and no MPI library needed.

Every exchange is a round of keys "<prefix><generation>/<round>/<rank>": a rank sets its
own and reads the others' (a get waits until the key exists, within the store's timeout).
Keys of a round are deleted once a later round shows every rank has read them.

The generation names one bootstrap of one world, fresh even where the store holds what
earlier worlds left: torchrun's elastic agent keeps its store while it restarts the
workers (after a failure, or when nodes join or leave: --nnodes MIN:MAX), a world that
died in its bootstrap leaves its keys half written, and no variable it gives the workers
names the world (the restart count is each agent's own: a node that joins later counts
from 0). So, as long as the processes of earlier worlds are gone (torchrun's agent stops
its workers before it restarts them), nothing a rank reads is trusted unless this world
wrote it: rank 0 takes a new generation from a counter (store.add: unique), every other
rank sets a random nonce under "<prefix>hello/<rank>" and waits for "<prefix>ack/<nonce>",
a key only the rank 0 that read this nonce can have written, holding the generation;
rank 0 answers each rank's latest nonce until each rank has confirmed under
"<prefix><generation>/ready/<rank>" (a nonce left by an earlier world is answered too,
and read by no one). A counter every
rank added to (this module's first scheme) gave the ranks of a world of 2 after one of
3 two different generations: they waited for each other's keys until the store's timeout.

An exchange may be given `cancelled`, a function that says why its world will never
form (or None): its waits then poll the store and ask it between looks, and raise
Cancelled with that reason. The elastic driver's worlds use it: a worker lost while a
world bootstraps leaves the others waiting for its keys, and the driver's next world
cancels this one (bootstrap/elastic.py).
"""

from __future__ import annotations

import pickle
import secrets
import time
from datetime import timedelta

from .. import _core


class Cancelled(_core.RdmacollError):
    """The world this exchange bootstraps will never form (its `cancelled` said why)."""


# polling the store while a wait can be cancelled: pauses that double from 1 ms up to 20 ms
# (the store also carries the agents' heartbeats); an elastic reset's own waits (one key
# per worker) look every ms for their first FAST_S, as the others of a world reach them
# within milliseconds of each other (fast_s)
FIRST_PAUSE_S, MAX_PAUSE_S, CANCEL_EVERY_S, FAST_S = 0.001, 0.02, 0.05, 0.05


def next_pause(pause: float, waited_s: float, fast_s: float = 0.0) -> float:
    """The pause after `pause`, waited_s into a wait on the store: FIRST_PAUSE_S for the
    first fast_s, then doubling up to MAX_PAUSE_S."""
    return FIRST_PAUSE_S if waited_s < fast_s else min(MAX_PAUSE_S, pause * 2)


def poll_until(done, what, timeout_s: float, cancelled=None, fast_s: float = 0.0) -> None:
    """Until done() (a look at the store) says so, pausing 1-20 ms between looks (next_pause:
    fast_s) and
    asking cancelled() every CANCEL_EVERY_S (a few requests per rank every 50 ms, at any
    world size): Cancelled with its reason; RdmacollError(what()) past the timeout, or
    naming the store when it fails."""
    asked = asked0 = time.monotonic()
    deadline = asked + timeout_s
    pause = FIRST_PAUSE_S
    while True:
        try:
            if done():
                return
        except RuntimeError as e:  # (torch's DistNetworkError: the store is gone)
            raise _core.RdmacollError(f"rdmacoll.init(): the bootstrap's store failed: {e}") from None
        now = time.monotonic()
        if now - asked >= CANCEL_EVERY_S:
            why = cancelled() if cancelled is not None else None
            if why:
                raise Cancelled(f"rdmacoll.init(): {why}")
            asked = now
        if now > deadline:
            raise _core.RdmacollError(what())
        time.sleep(pause)
        pause = next_pause(pause, now - asked0, fast_s)


class StoreExchange:
    name = "torch"

    def __init__(
        self,
        store,
        rank: int,
        size: int,
        prefix: str = "rdmacoll/",
        timeout_s: float | None = None,
        cancelled=None,
    ):
        self.store, self.rank, self.size = store, rank, size
        if timeout_s is None:
            timeout = getattr(store, "timeout", None)
            timeout_s = timeout.total_seconds() if isinstance(timeout, timedelta) else 300.0
        self.timeout_s, self.cancelled = timeout_s, cancelled
        self.prefix = f"{prefix}{self._generation(prefix, timeout_s)}/"
        self._round = 0

    def _wait(self, keys: list, what) -> None:
        """Until every key exists: store.wait, or (cancellable) looks at the store with
        the cancellation asked in between; RdmacollError naming what(missing keys) past
        the timeout."""
        if self.cancelled is None:
            try:
                self.store.wait(keys, timedelta(seconds=self.timeout_s))
                return
            except RuntimeError as e:  # (torch's DistStoreError; or the store is gone)
                raise _core.RdmacollError(f"{what(self._missing(keys))} ({e})") from None
        # one request per look (check() is true once every key exists)
        self._poll(lambda: self.store.check(keys), lambda: what(self._missing(keys)))

    def _poll(self, done, what) -> None:
        poll_until(done, what, self.timeout_s, self.cancelled)

    def _missing(self, keys: list) -> list:
        """The keys not in the store (all of them where the store cannot say)."""
        try:
            return [k for k in keys if not self.store.check([k])]
        except RuntimeError:
            return list(keys)

    def _generation(self, prefix: str, timeout_s: float) -> int:
        """This bootstrap's generation, the same on every rank of this world (module
        docstring)."""
        store = self.store
        if self.rank != 0:
            nonce = secrets.token_hex(16)
            store.set(f"{prefix}hello/{self.rank}", nonce)
            self._wait(
                [f"{prefix}ack/{nonce}"],
                lambda _: (
                    f"rdmacoll.init(): rank 0 did not answer rank {self.rank}'s bootstrap through "
                    f"torch's store within {timeout_s:.0f} s"
                ),
            )
            generation = int(store.get(f"{prefix}ack/{nonce}"))
            store.set(f"{prefix}{generation}/ready/{self.rank}", b"")
            return generation
        generation = int(store.add(f"{prefix}generations", 1))
        waiting = set(range(1, self.size))
        seen: dict = {}  # rank -> the nonce last answered

        def answered() -> bool:
            for q in sorted(waiting):
                if store.check([f"{prefix}{generation}/ready/{q}"]):
                    waiting.discard(q)
                elif store.check([f"{prefix}hello/{q}"]):
                    nonce = bytes(store.get(f"{prefix}hello/{q}")).decode()
                    if seen.get(q) != nonce:
                        store.set(f"{prefix}ack/{nonce}", str(generation))
                        seen[q] = nonce
            return not waiting

        self._poll(
            answered,
            lambda: (
                f"rdmacoll.init(): ranks {sorted(waiting)} of {self.size} did not reach the bootstrap "
                f"through torch's store within {timeout_s:.0f} s"
            ),
        )
        for nonce in seen.values():  # (a rank deletes nothing it may still read: these are read)
            self._drop(f"{prefix}ack/{nonce}")
        return generation

    def _drop(self, key: str) -> None:
        try:
            self.store.delete_key(key)
        except (RuntimeError, NotImplementedError):
            pass  # a store that cannot delete keeps them: a few small keys per bootstrap

    def _key(self, n: int, rank: int) -> str:
        return f"{self.prefix}{n}/{rank}"

    def allgather(self, obj):
        n = self._round
        self._round += 1
        self.store.set(self._key(n, self.rank), pickle.dumps(obj))
        keys = [self._key(n, q) for q in range(self.size)]
        if self.cancelled is not None:  # (otherwise the gets below wait, within the store's timeout)
            self._wait(
                keys,
                lambda missing: (
                    f"rdmacoll.init(): ranks {sorted(int(k.rpartition('/')[2]) for k in missing)} of "
                    f"{self.size} did not reach step {n} of the bootstrap within {self.timeout_s:.0f} s"
                ),
            )
        values = self.store.multi_get(keys) if hasattr(self.store, "multi_get") else [self.store.get(k) for k in keys]
        if n >= 1:  # every rank has set round n, so it has read round n-1: drop my key of it
            self._drop(self._key(n - 1, self.rank))
        return [pickle.loads(bytes(v)) for v in values]

    def bcast(self, obj):
        return self.allgather(obj if self.rank == 0 else None)[0]

    def barrier(self):
        self.allgather(None)


def tcp_store(address: str, timeout_s: float, is_master: bool = False):
    """A client of torch's TCPStore at host:port, or (is_master) its server, there."""
    from torch.distributed import TCPStore

    host, _, port = address.rpartition(":")
    return TCPStore(host, int(port), is_master=is_master, timeout=timedelta(seconds=timeout_s), wait_for_workers=False)


def prefixed(prefix: str, store):
    """store's keys under prefix (torch's PrefixStore)."""
    from torch.distributed import PrefixStore

    return PrefixStore(prefix, store)


def torchrun_exchange(timeout_s: float) -> StoreExchange:
    """The store of the job torchrun (or torch's env:// variables) started: torch's default
    group's when torch.distributed is initialised, else the one env:// rendezvous gives
    (under torchrun: a client of the agent's store, TORCHELASTIC_USE_AGENT_STORE)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        from torch.distributed.distributed_c10d import _get_default_store

        store, rank, size = _get_default_store(), dist.get_rank(), dist.get_world_size()
    else:
        from torch.distributed import rendezvous

        store, rank, size = next(rendezvous("env://", timeout=timedelta(seconds=timeout_s)))
    return StoreExchange(dist.PrefixStore("rdmacoll/", store), rank, size, timeout_s=timeout_s)
