"""Horovod's elastic state and run loop (horovod/common/elastic.py, 0.28.1), written once
for both adapters; nothing here imports a framework. An adapter gives State its object
broadcast and rank functions; run_fn resets with reset() (the next world of the job: in
place over this world's connections where it can be, else shutdown() and init();
rdmacoll/_in_place.py, bootstrap/elastic.py).

    @hvd.elastic.run
    def train(state): ... state.commit() ...
    state = hvd.elastic.TorchState(model, optimizer, epoch=0)   # (an ObjectState)
    train(state)

run_fn: state.sync() (rank 0's state everywhere), then func(state); when a collective
fails (HorovodInternalError: a worker died) the last commit is restored, when hosts
changed (HostsUpdatedInterrupt, raised on every rank by check_host_updates at a commit)
the state is kept as it is (committed just before); either way the job resets into its
next world and func runs again, from a sync unless the hosts were only removed (then every
rank already holds the same state: Horovod's skip_sync).

Where the driver's notices come from: Horovod's driver pushes them to rank 0 over HTTP;
rdmacoll's (rdmacoll/elastic_run.py) leaves them in its store, where rank 0 reads them at
each check (one small read). Each State starts from the notice current when it was made,
and again after each reset, so a worker that joins late or a world just formed does not
take an old notice for a new one.
"""

from __future__ import annotations

import functools

import rdmacoll as rc
from rdmacoll.bootstrap import elastic as _member

from ._horovod import HorovodInternalError, HostsUpdatedInterrupt


def _notice() -> tuple[int, int]:
    """(stamp, flags) of the driver's last change of hosts; (0, 0) outside elastic jobs."""
    m = _member.member()
    return m.host_update() if m is not None else (0, 0)


def _seen() -> int:
    """The stamp of the last change of hosts this worker's world was formed with: later
    ones are news (the driver's newest stamp when the world formed, not when this worker
    looks: a change between the two would be lost until the next); 0 outside elastic jobs."""
    m = _member.member()
    return m.world_stamp() if m is not None else 0


def _newcomers() -> bool:
    """Whether this worker's world has workers its last one had not; False outside
    elastic jobs."""
    m = _member.member()
    return m is not None and m.world_has_newcomers()


class State:
    """Horovod's State: state tracked in memory across workers. bcast_object(obj) ->
    rank 0's obj on every rank; get_rank() -> this worker's rank."""

    def __init__(self, bcast_object, get_rank):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._last_updated_timestamp = _seen()
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Functions run after every reset (a worker added or removed), e.g. to scale the
        learning rate to the new size."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self._last_updated_timestamp = _seen()
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Save the state in host memory, then check for changed hosts (raising
        HostsUpdatedInterrupt on every rank when they changed)."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raise HostsUpdatedInterrupt (on every rank alike) when the driver has changed the
        hosts since the last check."""
        prev = last = self._last_updated_timestamp
        update = 0
        if self._rank() == 0:
            stamp, flags = _notice()
            if stamp > last:
                last, update = stamp, flags
        # every rank decides on rank 0's reading (Horovod broadcasts it, too)
        prev, self._last_updated_timestamp, update = self._bcast_object((prev, last, update))
        if self._last_updated_timestamp > prev:
            raise HostsUpdatedInterrupt(update == _member.REMOVED)

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    def reset(self):
        """After a reset, before the sync."""


class ObjectState(State):
    """Horovod's ObjectState: every keyword argument an attribute, saved by commit(),
    restored by restore(), rank 0's after sync()."""

    def __init__(self, bcast_object, get_rank, **kwargs):
        self._bcast_object = bcast_object
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        self._saved_state = {attr: getattr(self, attr) for attr in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        for attr, value in self._saved_state.items():
            setattr(self, attr, value)


def reset():
    """Horovod's reset, the same in both adapters: leave this world, join the next one, in
    place where every member of the next was in this one (rdmacoll/_in_place.py)."""
    rc._elastic_reset()


def run_fn(func, reset=reset):
    """Horovod's run_fn: func(state, ...) until it returns, through every reset."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except HorovodInternalError:
                state.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            reset()
            # Horovod skips the sync when hosts were only removed; but a host that was
            # waiting (--max-np) may have come in with them, and its worker syncs: so do all
            if skip_sync and _newcomers():
                skip_sync = False
            state.on_reset()

    return wrapper
