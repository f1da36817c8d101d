"""Horovod's elastic API in the TensorFlow adapter under rdmacoll-run --elastic
(tests/test_elastic.py): hvd.elastic.run over a KerasState holding a float64 Dense layer,
its SGD optimizer and the world size of every committed step; the gradients averaged by
DistributedGradientTape, eagerly.

argv: steps, then optionally kill=HOST:STEP (the worker on HOST SIGKILLs itself in step
STEP, after its gradients' allreduce, before applying them) and mode=fit: Keras' fit
instead of the eager loop, with Horovod's three elastic callbacks, 3 epochs of 4 batches
(steps is then unused; the kill comes before batch STEP, counted over the committed ones).

Each step, rank r of a world of n takes the gradient of sum((x K)^2) for x filled with
((step mod 3) + 1) (r + 1) / 10; the reference replays the committed steps' sizes with
NumPy. Records as tests/workers/elastic_torch.py's: "world", "done".
"""

import os
import signal
import sys

import keras
import numpy as np
import tensorflow as tf

import rdmacoll.frameworks.tensorflow.keras as hvd
from common import digest, emit, main, set_rank

IN, OUT, LR = 8, 4, 0.01


def x_of(step, r):
    return np.full((2, IN), ((step % 3) + 1) * (r + 1) / 10)


def reference(k, sizes):
    """The kernel k after the committed steps, in worlds of these sizes, by NumPy."""
    lr = float(np.float32(LR))  # (Keras keeps the learning rate in a float32 variable)
    for step, n in enumerate(sizes):
        grads = [2 * x_of(step, r).T @ (x_of(step, r) @ k) for r in range(n)]
        k = k - lr * (sum(grads) / n)
    return k


def body():
    steps = int(sys.argv[1])
    plan = dict(a.split("=", 1) for a in sys.argv[2:])
    host = os.environ["RDMACOLL_ELASTIC_HOST"]
    kill = tuple(plan["kill"].rsplit(":", 1)) if "kill" in plan else None

    hvd.init()
    model = keras.Sequential(
        [
            keras.Input((IN,), dtype="float64"),
            keras.layers.Dense(
                OUT, use_bias=False, dtype="float64", kernel_initializer=keras.initializers.Constant(0.1)
            ),
        ]
    )
    k0 = model.trainable_variables[0].numpy()  # (Keras' constant initialiser rounds 0.1 to float32)
    opt = keras.optimizers.SGD(LR)
    opt.build(model.trainable_variables)
    state = hvd.elastic.KerasState(model, opt, sizes=[])

    @hvd.elastic.run
    def train(state):
        set_rank(hvd.rank())
        emit("world", size=hvd.size(), host=host, from_step=len(state.sizes))
        while len(state.sizes) < steps:
            step, r, n = len(state.sizes), hvd.rank(), hvd.size()
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(model(tf.constant(x_of(step, r))) ** 2)
            grads = hvd.DistributedGradientTape(tape).gradient(loss, model.trainable_variables)
            if kill == (host, str(step)):
                os.kill(os.getpid(), signal.SIGKILL)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            state.sizes = state.sizes + [n]
            state.commit()

    if plan.get("mode") == "fit":
        fit(model, state, k0, host, kill)
        return
    train(state)
    k = model.trainable_variables[0].numpy()
    error = float(np.abs(k - reference(k0, state.sizes)).max())
    emit("done", sizes=state.sizes, digest=digest(k), error=error, host=host)
    hvd.shutdown()


class Sizes(keras.callbacks.Callback):
    """Before the commit (callbacks run in order): the world size of the batch just ended."""

    def __init__(self, state):
        super().__init__()
        self.state = state

    def on_batch_end(self, batch, logs=None):
        self.state.sizes = self.state.sizes + [hvd.size()]


class Kill(keras.callbacks.Callback):
    def __init__(self, state, host, kill):
        super().__init__()
        self.state, self.host, self.kill = state, host, kill

    def on_batch_begin(self, batch, logs=None):
        if self.kill == (self.host, str(len(self.state.sizes))):
            os.kill(os.getpid(), signal.SIGKILL)


def fit(model, state, k0, host, kill, epochs=3, batches=4):
    """mode=fit: Keras' fit (its train step a tf.function: a failure reaches run() as the
    graph's UnknownError) with Horovod's three elastic callbacks; loss: the mean over the
    batch's 2 (equal) rows of sum((x K)^2), so each rank's gradient is 2 x^T (x K) of one row."""
    model.compile(
        optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(LR)),
        loss=lambda y, p: tf.reduce_sum(p**2, axis=-1),
    )
    model.optimizer.build(model.trainable_variables)
    state = hvd.elastic.KerasState(model, sizes=[], epoch=0, batch=0)
    callbacks = [
        Kill(state, host, kill),
        hvd.elastic.UpdateEpochStateCallback(state),
        hvd.elastic.UpdateBatchStateCallback(state),
        Sizes(state),
        hvd.elastic.CommitStateCallback(state),
    ]

    @hvd.elastic.run
    def train(state):
        set_rank(hvd.rank())
        emit("world", size=hvd.size(), host=host, from_step=len(state.sizes))
        x = np.repeat(x_of(0, hvd.rank()), batches, axis=0)
        model.fit(
            x,
            np.zeros((len(x), OUT)),
            batch_size=2,
            epochs=epochs - state.epoch,
            shuffle=False,
            verbose=0,
            callbacks=callbacks,
        )

    train(state)
    k = model.trainable_variables[0].numpy()
    lr = float(np.float32(LR))
    want = k0
    for n in state.sizes:
        want = want - lr * sum(2 * x_of(0, r)[:1].T @ (x_of(0, r)[:1] @ want) for r in range(n)) / n
    emit(
        "done",
        sizes=state.sizes,
        digest=digest(k),
        error=float(np.abs(k - want).max()),
        host=host,
        epoch=state.epoch,
        batch=state.batch,
    )
    hvd.shutdown()


main(body)
