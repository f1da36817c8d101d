"""hvd.join() for torch: a rank that ran out of data takes part with zeros in the
collectives the other ranks still issue, until every rank has joined (Horovod's join).

The protocol (a joined rank learns each collective from the call's first message, and
what it cannot learn so is announced by CONTROL rounds) is framework-neutral:
rdmacoll/frameworks/_join.py. The torch parts:

- ops.py issues its collectives through _join's functions: allreduce and
  grouped_allreduce are served (joined ranks reduce zeros; Average divides by size(),
  as Horovod's) at no cost to the training ranks; allgather, broadcast, alltoall and
  reducescatter raise Horovod's "... is not supported with Join at this time." on the
  training ranks (from synchronize() for the _async forms) while a rank is joined;
  barrier is served.
- DistributedOptimizer costs nothing more: its buckets are allreduces and its sparse
  gradients allgathers that a joined rank serves (zeros; an empty gradient, where
  Horovod refuses sparse gradients with join), launched during backward as always;
  collectives that backward itself issues (SyncBatchNorm, differentiable allreduce) are
  served in their place, as each call is served on its own. A joined rank's parameters
  are not updated (as in Horovod); every rank rebuilds the buckets at its first step
  after join().
  Optimizers on process sets are not served (Horovod's join is the global set's too).
- join() returns the rank that joined last (ties: the higher rank).
"""

from __future__ import annotations

from .._join import join as _join


def join():
    """Take part in the other ranks' collectives until every rank has joined; returns the
    rank that joined last."""
    return _join()
