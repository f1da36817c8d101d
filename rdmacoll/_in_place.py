"""Horovod's elastic reset, in place where it can be: the next world of the job formed over
the connections and memory of the world this worker is in (issue 30, docs/elastic.md).

    reset()     # hvd.elastic.run's, between a failure (or changed hosts) and state.on_reset()

A world the driver forms without newcomers (every member was in world m, the last that
formed: bootstrap/elastic.py, r/<n>/from) is formed in place when every member still holds
world m's session: each member splits a communicator off world m's over the members' ranks
there (comm/links.h: a channel of its own on the same connections; no new device, listener,
connection or registration), the members exchange the split's address in one round of keys
through the driver's store (its only step there), connect, and meet in a barrier over the
new communicator. The barrier takes a message from every member, and an endpoint delivers in
order, so what any member wrote in the failed world has landed before the new world's first
call. Then the old session closes: its communicator burns its channel and keeps its memory
registered for as long as the connections live, so what the lost worker wrote, or a hung one
writes when it runs again, lands there, harmlessly, and what it sends on the old channel is
dropped. (The process sets of the old session are closed first, as shutdown() closes them.)

Otherwise every member bootstraps world n anew (shutdown(), then its bootstrap through the
store): every member decides alike from the one round, where a member that cannot (it holds
another world, or came through init(): Member.next_world, which writes its part too) wrote
None, and from the channels in use at each member (free_channel). A member lost while the
world forms: the driver forms the next (the others see it in the store: store.Cancelled), and
the reset starts over from the same session. Leaving that session to a later in-place world,
rather than closing it, is what lets the second failure of a reset still shrink in place.

What it costs the job: the split's memory (control region, staging) per shrink, and one of
the links' 64 channels (a burned one is never reused); past them, worlds are bootstrapped.
"""

from __future__ import annotations

import logging

from . import _log, _session
from .bootstrap import World, bootstrap, elastic, store


def reset(init, start) -> None:
    """Leave this world for the elastic job's next: in place when the module docstring says
    so, else shutdown() and init(). start(world, made_by) makes a bootstrap World the current
    session as init() does (its process sets registered)."""
    old = _session.current()
    member = elastic.member()
    if old.closed or not old.elastic or member is None:
        _session.stop()
        init()
        return
    settings = old.settings
    # The process sets go first, as shutdown() closes them: a peer's operation queued on one
    # of them fails at once (this rank left) instead of holding up the split, which waits for
    # what this process queued (the sets are not carried into the next world)
    if old.sets is not None:
        old.sets.stop()
    while True:
        place = member.next_place(settings["timeout"] + settings["elastic_timeout"] + 60)
        try:
            world = _formed_in_place(old, place)
            if world is None:
                old.close(wait=False)
                world = bootstrap(old.made_by[0], exchange=place.exchange())
        except store.Cancelled as e:
            _log.logger.info(f"{e}; joining the next")
            continue
        break
    try:
        old.close(wait=False)  # (formed in place: the old world goes now; its hooks run)
    finally:
        start(world, old.made_by)


def _formed_in_place(old, place):
    """World n (place) formed in place off old's, or None where not every member can (the
    module docstring); store.Cancelled when it will never form."""
    if place.origin is None:  # (newcomers, who bootstrap it: every member reads the same)
        return None
    m, ranks = place.origin
    sub, mine = None, None
    mine_ok = not old.closed and getattr(old.world.exchange, "round", None) == m and ranks[place.rank] == old.rank
    if mine_ok:
        try:
            sub = old.comm.split(ranks)
            mine = sub.address()
        except Exception as e:  # noqa: BLE001 - bootstrapped anew, with the others
            _log.say(logging.INFO, old.rank, f"world {place.round} not formed in place: {e}")
            sub = None
    try:
        addresses = place.gather(mine if sub is not None else None)
        if any(a is None for a in addresses) or sub.free_channel(addresses) < 0:
            # (a member that cannot; or every channel in use at some member: all see the same)
            _log.say(logging.INFO, old.rank, f"world {place.round} is bootstrapped anew, not formed in place")
            if sub is not None:
                sub.close()
            return None
        try:
            sub.connect(addresses)
            sub.barrier()
        except Exception as e:  # noqa: BLE001 - a member lost while it formed: the driver's next world
            _log.say(logging.INFO, old.rank, f"world {place.round} failed while it formed in place: {e}")
            _until_given_up(place, e)
        place.formed()
    except BaseException:
        if sub is not None:
            sub.close()
        raise
    host_of, index = [], {}
    for q in ranks:
        host_of.append(index.setdefault(old.host_of[q], len(index)))
    local_rank, local_size, *_ = _session.layout(host_of, place.rank)
    _log.say(logging.INFO, place.rank, f"world {place.round} formed in place: rank {place.rank} of {place.size}")
    return World(
        place.rank,
        place.size,
        local_rank,
        local_size,
        sub,
        old.settings,
        old.world.sources,
        old.world.tuning_file,
        place,
        host_of,
    )


def _until_given_up(place, error) -> None:
    """Wait for the driver to give world n up (store.Cancelled): it does once it sees the
    member that made `error` lost; RdmacollError naming it past the timeout."""
    store.poll_until(
        lambda: False,
        lambda: f"rdmacoll.init(): world {place.round} failed to form in place: {error}",
        place.timeout_s,
        place.cancelled,
    )
