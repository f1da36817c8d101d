"""torch's key-value store as a bootstrap (the only module besides the framework adapters
that imports torch, and only when the store bootstraps): the store torchrun's agent
already runs (or the one a torch.distributed backend is created with) moves bootstrap's
few objects; no rendezvous server of rdmacoll's own, and no MPI library needed.

Every exchange is a round of keys "<prefix><generation>/<round>/<rank>": a rank sets its
own and reads the others' (a get waits until the key exists, within the store's timeout).
Keys of a round are deleted once a later round shows every rank has read them. The
generation counts the bootstraps over one store (each rank adds 1 to a counter when its
exchange is made): init() after shutdown() in the same job starts on fresh keys, never on
the previous bootstrap's last round (which a fast rank would read as this one's).
"""

from __future__ import annotations

import pickle
from datetime import timedelta


class StoreExchange:
    name = "torch"

    def __init__(self, store, rank: int, size: int, prefix: str = "rdmacoll/"):
        self.store, self.rank, self.size = store, rank, size
        # Every member adds once per bootstrap, and a bootstrap ends with a round that every
        # member read: no member adds for the next one before all have added for this one.
        generation = (int(store.add(f"{prefix}generations", 1)) - 1) // size
        self.prefix = f"{prefix}{generation}/"
        self._round = 0

    def _key(self, n: int, rank: int) -> str:
        return f"{self.prefix}{n}/{rank}"

    def allgather(self, obj):
        n = self._round
        self._round += 1
        self.store.set(self._key(n, self.rank), pickle.dumps(obj))
        keys = [self._key(n, q) for q in range(self.size)]
        values = self.store.multi_get(keys) if hasattr(self.store, "multi_get") else [self.store.get(k) for k in keys]
        if n >= 1:  # every rank has set round n, so it has read round n-1: drop my key of it
            try:
                self.store.delete_key(self._key(n - 1, self.rank))
            except (RuntimeError, NotImplementedError):
                pass  # a store that cannot delete keeps them: a few small keys per bootstrap
        return [pickle.loads(bytes(v)) for v in values]

    def bcast(self, obj):
        return self.allgather(obj if self.rank == 0 else None)[0]

    def barrier(self):
        self.allgather(None)


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
    return StoreExchange(dist.PrefixStore("rdmacoll/", store), rank, size)
