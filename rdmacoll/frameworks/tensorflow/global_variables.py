"""TF1 start-up broadcast (graphs run by tf.compat.v1.Session): broadcast_global_variables
and BroadcastGlobalVariablesHook, as horovod.tensorflow has them."""

from __future__ import annotations

import tensorflow as tf

from .functions import broadcast_variables


def broadcast_global_variables(root_rank):
    """An op that assigns root_rank's values of every global variable of the default
    graph (tf.compat.v1.global_variables()) on every rank: run it once after the
    variables are initialised. Graph mode only, as in Horovod: eagerly it raises
    RuntimeError (pass the variables to broadcast_variables instead)."""
    if tf.executing_eagerly():
        raise RuntimeError(
            "hvd.broadcast_global_variables() does not support eager execution. "
            "Please use `hvd.broadcast_variables(<model/optimizer variables>)` instead."
        )
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank, name="broadcast_global_variables")


class BroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """A SessionRunHook (tf.compat.v1.train.MonitoredTrainingSession) that runs
    broadcast_global_variables(root_rank) once the session is created, so that every
    rank starts from root_rank's initial (or restored) values. device: accepted for
    Horovod compatibility (CPU either way)."""

    def __init__(self, root_rank, device=""):
        super().__init__()
        self.root_rank = root_rank
        self.bcast_op = None
        self.device = device

    def begin(self):
        if self.bcast_op is None or self.bcast_op.graph is not tf.compat.v1.get_default_graph():
            self.bcast_op = broadcast_global_variables(self.root_rank)

    def after_create_session(self, session, coord):
        session.run(self.bcast_op)
