"""TensorFlow / Keras 3 adapter checks, many per launch (TensorFlow imports slowly).

Run under mpiexec with 2 ranks. Reports through common.emit():
  check   {name, ok, detail}        one per numbered check
  epoch   {run, epoch, digest, diff} weights after each epoch of a training run: digest
                                     (compared across ranks by the test) and the largest
                                     difference from a single process trained on the
                                     union of the ranks' batches
  done    {checks}
"""

import json
import os
import re
import itertools
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from common import digest, emit, main, set_rank  # noqa: E402

CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def setup_tf():
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    return tf


def weights_digest(variables):
    import numpy as np

    return digest(np.concatenate([np.asarray(v).reshape(-1).astype(np.float64) for v in variables]))


# --------------------------------------------------------------------------- training set-up

FEATURES, BATCH, STEPS, EPOCHS = 6, 8, 4, 3


def dataset(rank, size, passes=1):
    """Every rank's shard (rank's own rows) and the union batches of a single process:
    union batch k = the k-th group of `passes` batches of every rank, in rank order."""
    import numpy as np

    rng = np.random.default_rng(7)
    rows = BATCH * STEPS
    x = rng.standard_normal((size * rows, FEATURES)).astype(np.float32)
    y = (np.sin(x[:, :1]) + 0.5 * x[:, 1:2] ** 2).astype(np.float32)
    shards = [(x[r * rows : (r + 1) * rows], y[r * rows : (r + 1) * rows]) for r in range(size)]
    chunk = BATCH * passes
    ux = np.concatenate([s[0][k : k + chunk] for k in range(0, rows, chunk) for s in shards])
    uy = np.concatenate([s[1][k : k + chunk] for k in range(0, rows, chunk) for s in shards])
    return shards[rank], (ux, uy), chunk * size


def make_model(seed):
    import keras

    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(16, activation="tanh"),
            keras.layers.Dense(8, activation="tanh"),
            keras.layers.Dense(1),
        ]
    )


class EpochWeights:
    """A Keras callback factory recording the weights after every epoch."""

    @staticmethod
    def make():
        import keras

        class Recorder(keras.callbacks.Callback):
            def __init__(self):
                super().__init__()
                self.epochs = []

            def on_epoch_end(self, epoch, logs=None):
                self.epochs.append([w.copy() for w in self.model.get_weights()])

        return Recorder()


def max_diff(a, b):
    import numpy as np

    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b))


def report_epochs(run, got, want):
    for e, (g, w) in enumerate(zip(got, want)):
        emit("epoch", run=run, epoch=e, digest=weights_digest(g), diff=max_diff(g, w))


def fit_run(hvd, run, passes=1):
    """model.fit on this rank's shard with DistributedOptimizer vs one process on the
    union batches (same initial weights, plain optimizer)."""
    import keras

    rank, size = hvd.rank(), hvd.size()
    (x, y), (ux, uy), union_batch = dataset(rank, size, passes)

    def train(model, opt, xs, ys, batch):
        model.compile(optimizer=opt, loss="mse")
        rec = EpochWeights.make()
        model.fit(xs, ys, batch_size=batch, epochs=EPOCHS, shuffle=False, verbose=0, callbacks=[rec])
        return rec.epochs

    opt = hvd.DistributedOptimizer(
        keras.optimizers.SGD(0.05, momentum=0.9), backward_passes_per_step=passes, average_aggregated_gradients=True
    )
    got = train(make_model(1), opt, x, y, BATCH)
    want = train(make_model(1), keras.optimizers.SGD(0.05, momentum=0.9), ux, uy, union_batch)
    report_epochs(run, got, want)
    return opt


# --------------------------------------------------------------------------- checks


@check
def collectives(hvd, tf, np):
    """Tensor collectives eagerly and in tf.function, against NumPy."""
    rank, size = hvd.rank(), hvd.size()
    bad = []

    def same(name, got, want, tol=0.0):
        got, want = np.asarray(got), np.asarray(want)
        if got.shape != want.shape or not np.allclose(got, want, atol=tol, rtol=0):
            bad.append(f"{name}: got {got.tolist()} want {want.tolist()}")

    base = np.arange(5, dtype=np.float32)
    mine = base + rank
    total = sum(base + r for r in range(size))
    rows = np.full((rank + 1, 2), rank, np.int32)
    gathered = np.concatenate([np.full((r + 1, 2), r, np.int32) for r in range(size)])
    # uint16, which Horovod's TensorFlow ops move (values above int16's range)
    urows = np.full((rank + 1, 2), 40000 + rank, np.uint16)
    upair = np.full(2, 40000 + rank, np.uint16)
    uspread = np.full(2 * size, 40000 + rank, np.uint16)

    def ops(x, rows, urows, upair, uspread):
        return [
            hvd.allreduce(x, op=hvd.Sum),
            hvd.allreduce(x),
            hvd.allreduce(x, op=hvd.Max),
            *hvd.grouped_allreduce([x, tf.cast(x, tf.float64) * 2], op=hvd.Sum),
            hvd.allgather(rows),
            hvd.broadcast(x, size - 1),
            hvd.reducescatter(tf.reshape(tf.tile(x, [size]), [size, 5]), op=hvd.Sum),
            *hvd.alltoall(tf.repeat(x[:size], 2), splits=[2] * size),  # element j of every rank, twice
            hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16),
            hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5),
            hvd.allgather(urows),
            hvd.broadcast(upair, size - 1),
            hvd.alltoall(uspread),
        ]

    want = [
        total,
        total / size,
        base + size - 1,
        total,
        2 * total,
        gathered,
        base + size - 1,
        total[None, :],
        np.repeat([base[rank] + r for r in range(size)], 2),
        np.full(size, 2, np.int32),
        total,
        total,
        np.concatenate([np.full((r + 1, 2), 40000 + r, np.uint16) for r in range(size)]),
        np.full(2, 40000 + size - 1, np.uint16),
        np.repeat(40000 + np.arange(size), 2).astype(np.uint16),
    ]
    args = [tf.constant(a) for a in (mine, rows, urows, upair, uspread)]
    for mode, fn in (("eager", ops), ("tf.function", tf.function(ops))):
        for i, (g, w) in enumerate(zip(fn(*args), want)):
            same(f"{mode} #{i}", g, w, 1e-3 if i == 10 else 1e-6)
            if w.dtype == np.uint16 and g.dtype != tf.uint16:
                bad.append(f"{mode} #{i}: dtype {g.dtype.name}, want uint16")
    sparse = hvd.allreduce(
        tf.IndexedSlices(
            tf.constant([[1.0, 2.0]]) * (rank + 1), tf.constant([rank]), dense_shape=tf.constant([size, 2])
        ),
        op=hvd.Sum,
    )
    same(
        "IndexedSlices",
        tf.convert_to_tensor(sparse),
        np.array([[r + 1.0, 2.0 * (r + 1)] for r in range(size)], np.float32),
    )
    slices = tf.IndexedSlices(
        tf.constant([[1.0, 2.0]]) * (rank + 1), tf.constant([rank]), dense_shape=tf.constant([size, 2])
    )
    avg = hvd.allreduce(slices)
    same(
        "IndexedSlices Average",
        tf.convert_to_tensor(avg),
        np.array([[(r + 1.0) / size, 2.0 * (r + 1) / size] for r in range(size)], np.float32),
    )
    for kwargs, words in (
        ({"op": hvd.Max}, "Only Sum and Average ops are supported with tf.IndexedSlices"),
        ({"prescale_factor": 2.0}, "Pre/postscale_factor are not supported with tf.IndexedSlices"),
    ):
        try:
            hvd.allreduce(slices, **kwargs)
            bad.append(f"IndexedSlices {kwargs}: no error")
        except NotImplementedError as e:  # Horovod's exception type and words
            if str(e) != words:
                bad.append(f"IndexedSlices {kwargs}: {e}")
    if hvd.broadcast_object({"from": rank}, root_rank=size - 1) != {"from": size - 1}:
        bad.append("broadcast_object")
    if hvd.allgather_object(rank * 10) != [r * 10 for r in range(size)]:
        bad.append("allgather_object")
    return not bad, "; ".join(bad[:4])


@check
def gradients(hvd, tf, np):
    """Gradients of every collective as Horovod 0.28.1 registers them (mpi_ops.py), eagerly
    and in tf.function: loss = sum(W_r * y) on rank r, the gradient wrt this rank's input
    against the formula computed here from every rank's W."""
    rank, size = hvd.rank(), hvd.size()
    w = [np.arange(8, dtype=np.float32) * (r + 1) + 1 for r in range(size)]  # rank r's weights
    x = tf.constant(np.arange(4, dtype=np.float32) + rank)
    rows = sum(q + 1 for q in range(size))
    gather_w = [np.arange(rows * 2, dtype=np.float32).reshape(rows, 2) * (r + 1) for r in range(size)]
    start = sum(q + 1 for q in range(rank))
    mean_g = sum(gather_w) / size
    cases = {  # name: (f(x) -> list of outputs, the weights of each output on rank r, the expected gradient)
        "allreduce Sum": (lambda t: [hvd.allreduce(t, op=hvd.Sum)], lambda r: [w[r][:4]], sum(v[:4] for v in w)),
        "allreduce Average": (lambda t: [hvd.allreduce(t)], lambda r: [w[r][:4]], sum(v[:4] for v in w) / size),
        "allreduce scaled": (
            lambda t: [hvd.allreduce(t, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)],
            lambda r: [w[r][:4]],
            sum(v[:4] for v in w),
        ),
        "grouped_allreduce": (
            lambda t: hvd.grouped_allreduce([t, 2 * t], op=hvd.Sum),
            lambda r: [w[r][:4], w[r][4:]],
            sum(v[:4] + 2 * v[4:] for v in w),
        ),
        "allgather": (
            lambda t: [hvd.allgather(tf.reshape(tf.tile(t[:1], [2 * (rank + 1)]), [rank + 1, 2]))],
            lambda r: [gather_w[r]],
            np.array([mean_g[start : start + rank + 1].sum()] + [0] * 3, np.float32),
        ),
        "broadcast": (
            lambda t: [hvd.broadcast(t, size - 1)],
            lambda r: [w[r][:4]],
            sum(v[:4] for v in w) / size * (rank == size - 1),
        ),
        "alltoall splits": (
            lambda t: [hvd.alltoall(t[:size], splits=[1] * size)[0]],
            lambda r: [w[r][:size]],
            np.array([w[q][rank] for q in range(size)] + [0] * (4 - size), np.float32),
        ),
        "alltoall even": (
            lambda t: [hvd.alltoall(t[:size])],
            lambda r: [w[r][:size]],
            np.array([w[q][rank] for q in range(size)] + [0] * (4 - size), np.float32),
        ),
        "reducescatter Sum": (
            lambda t: [hvd.reducescatter(tf.reshape(tf.tile(t[:2], [size]), [size, 2]), op=hvd.Sum)],
            lambda r: [w[r][:2].reshape(1, 2)],
            np.array(list(size * sum(v[:2] for v in w)) + [0, 0], np.float32),
        ),
        "reducescatter Average": (
            lambda t: [hvd.reducescatter(tf.reshape(tf.tile(t[:2], [size]), [size, 2]))],
            lambda r: [w[r][:2].reshape(1, 2)],
            np.array(list(sum(v[:2] for v in w)) + [0, 0], np.float32),
        ),
    }
    bad = []
    if isinstance(hvd.alltoall(tf.zeros([size, 3])), tuple):
        bad.append("alltoall without splits returned a tuple (Horovod returns the tensor)")
    for name, (f, weights, want) in cases.items():

        def grad_of(t, f=f, weights=weights):
            with tf.GradientTape() as tape:
                tape.watch(t)
                loss = tf.add_n([tf.reduce_sum(tf.constant(wt) * y) for wt, y in zip(weights(rank), f(t))])
            return tape.gradient(loss, t)

        for mode, fn in (("eager", grad_of), ("tf.function", tf.function(grad_of))):
            got = fn(x)
            if got is None or not np.allclose(got.numpy(), want, rtol=1e-6, atol=1e-6):
                bad.append(f"{mode} {name}: got {None if got is None else got.numpy().tolist()} want {want.tolist()}")
    return not bad, "; ".join(bad[:4])


@check
def layout_ops_and_the_rest(hvd, tf, np):
    """rank_op & co. eagerly and in a graph, cross_rank/size, broadcast_, grouped
    allgather/reducescatter, broadcast_object_fn, the capability probes and
    start/stop_timeline, against what they must be."""
    import rdmacoll.frameworks.tensorflow as hvd  # (the layout ops are horovod.tensorflow's, not keras')

    rank, size = hvd.rank(), hvd.size()
    bad = []

    def ops():
        return [hvd.rank_op(), hvd.size_op(), hvd.local_rank_op(), hvd.local_size_op(), hvd.process_set_included_op()]

    for mode, fn in (("eager", ops), ("tf.function", tf.function(ops))):
        got = [int(t.numpy()) for t in fn()]
        if got != [rank, size, hvd.local_rank(), hvd.local_size(), 1]:
            bad.append(f"{mode} layout ops {got}")
    if (hvd.cross_rank(), hvd.cross_size(), hvd.is_homogeneous()) != (0, 1, True):
        bad.append(f"one host: cross {hvd.cross_rank(), hvd.cross_size(), hvd.is_homogeneous()}")
    unknown = [int(hvd.size_op(process_set_id=7)), int(hvd.process_set_included_op(process_set_id=7))]
    if unknown != [-3, -3]:  # Horovod's HOROVOD_PROCESS_SET_ERROR_UNKNOWN_SET
        bad.append(f"size_op / process_set_included_op of a set that does not exist: {unknown}")
    v = tf.Variable(np.full(3, rank, np.float32))
    new = hvd.broadcast_([v], root_rank=size - 1)
    if not (np.array_equal(v.numpy(), np.full(3, size - 1)) and np.array_equal(new[0].numpy(), v.numpy())):
        bad.append(f"broadcast_ left {v.numpy().tolist()}")
    g = hvd.grouped_allgather([tf.fill([rank + 1], float(rank)), tf.constant([rank], tf.int64)])
    if not (
        np.array_equal(g[0].numpy(), np.concatenate([np.full(r + 1, r, np.float32) for r in range(size)]))
        and np.array_equal(g[1].numpy(), np.arange(size))
    ):
        bad.append(f"grouped_allgather {[t.numpy().tolist() for t in g]}")
    x = tf.reshape(tf.range(size * 2, dtype=tf.float32), [size, 2]) * (rank + 1)
    rs = hvd.grouped_reducescatter([x, 2 * x], op=hvd.Sum)
    total = sum(r + 1 for r in range(size))
    want = np.arange(size * 2, dtype=np.float32).reshape(size, 2)[rank : rank + 1] * total
    if not (np.array_equal(rs[0].numpy(), want) and np.array_equal(rs[1].numpy(), 2 * want)):
        bad.append(f"grouped_reducescatter {[t.numpy().tolist() for t in rs]}")
    bcast = hvd.broadcast_object_fn(root_rank=size - 1)
    for obj, want in (({"from": rank}, {"from": size - 1}), ([rank] * 3, [size - 1] * 3)):
        got = bcast(obj)
        if got != want:
            bad.append(f"broadcast_object_fn gave {got}, not {want}")
    # Horovod's probes and timeline calls, in both modules (answers: docs/torch.md, Capabilities)
    import rdmacoll.frameworks.tensorflow.keras as hvdk

    for mod in (hvd, hvdk):
        answers = [
            getattr(mod, p)()
            for p in (
                "mpi_built",
                "gloo_built",
                "ccl_built",
                "ddl_built",
                "cuda_built",
                "rocm_built",
                "mpi_enabled",
                "gloo_enabled",
                "nccl_built",
                "mpi_threads_supported",
            )
        ]
        if answers != [False] * 8 + [0, True]:
            bad.append(f"{mod.__name__} probes {answers}")
    import shutil
    import tempfile

    base = hvd.broadcast_object(tempfile.mkdtemp(prefix="rc-tf-timeline-") if rank == 0 else None, root_rank=0)
    hvd.start_timeline(os.path.join(base, "tl.json"))
    hvd.allreduce(tf.ones(2), name="in.timeline")
    hvd.stop_timeline()
    hvd.allreduce(tf.ones(2), name="after.timeline")
    mine = os.path.join(base, f"tl.rank{rank}.json")
    names = (
        [e.get("args", {}).get("name") for e in json.load(open(mine))["traceEvents"] if e.get("cat") == "op"]
        if os.path.exists(mine)
        else None
    )
    named = {re.sub(r"(\.\d+)+$", "", str(n)) for n in names or ()}  # (TF adds ".<op>.<call>")
    if names is None or "in.timeline" not in named or "after.timeline" in named:
        bad.append(f"timeline {mine}: operations named {names}")
    hvd.allreduce(tf.ones(1), name="timeline.read")  # every rank has read its file
    if rank == 0:
        shutil.rmtree(base, ignore_errors=True)
    return not bad, "; ".join(bad[:4])


@check
def partial_distributed(hvd, tf, np):
    """PartialDistributedGradientTape / PartialDistributedOptimizer: the local layer's
    gradients stay this rank's (divided by the size unless scale_local_gradients=False),
    the others are averaged; checked against every rank's plain gradients."""
    import keras

    import rdmacoll.frameworks.tensorflow as hvdtf

    rank, size = hvd.rank(), hvd.size()
    x = tf.constant(np.random.default_rng(rank).normal(size=(4, FEATURES)).astype(np.float32))
    model = make_model(1)
    local = model.layers[0]
    n_local = len(local.trainable_weights)

    def loss():
        return tf.reduce_sum(model(x) ** 2)

    with tf.GradientTape() as tape:
        value = loss()
    plain = [g.numpy() for g in tape.gradient(value, model.trainable_variables)]
    every = hvd.allgather_object([g.tolist() for g in plain])
    mean = [sum(np.array(every[q][i], np.float32) for q in range(size)) / size for i in range(len(plain))]
    bad = []

    def expect(scale):
        return [plain[i] / (size if scale else 1) if i < n_local else mean[i] for i in range(len(plain))]

    def compare(what, got, want):
        for i, (g, w) in enumerate(zip(got, want)):
            if not np.allclose(g, w, rtol=1e-5, atol=1e-6):
                bad.append(f"{what} variable {i}")

    def tape_grads(scale):
        with tf.GradientTape() as t:
            v = loss()
        t = hvdtf.PartialDistributedGradientTape(t, local_layers=[local], scale_local_gradients=scale)
        return t.gradient(v, model.trainable_variables)

    for scale in (True, False):
        compare(f"tape scale={scale} eager", [g.numpy() for g in tape_grads(scale)], expect(scale))
        compare(
            f"tape scale={scale} tf.function",
            [g.numpy() for g in tf.function(lambda: tape_grads(scale))()],
            expect(scale),
        )
    # Horovod's test_partial_distributed_optimizer: _compute_gradients on a tape
    with tf.GradientTape(persistent=True) as t:
        v = loss()
    opt = hvd.PartialDistributedOptimizer(keras.optimizers.SGD(1.0), local_layers=local)
    pairs = opt._compute_gradients(v, model.trainable_variables, tape=t)
    compare("optimizer _compute_gradients", [g.numpy() for g, _ in pairs], expect(True))
    before = [v.numpy().copy() for v in model.trainable_variables]
    opt = hvd.PartialDistributedOptimizer(keras.optimizers.SGD(1.0), local_layers=local)
    with tf.GradientTape() as t:
        v = loss()
    opt.apply_gradients(zip(t.gradient(v, model.trainable_variables), model.trainable_variables))
    compare("optimizer", [b - v.numpy() for b, v in zip(before, model.trainable_variables)], expect(True))
    try:
        hvd.PartialDistributedOptimizer(keras.optimizers.SGD(1.0), local_layers=[model.trainable_variables[0]])
        bad.append("a variable as a local layer was accepted")
    except ValueError as e:
        if str(e) != "All local layers must be of tf.keras.layers.Layer type.":
            bad.append(f"error text: {e}")
    return not bad, "; ".join(bad[:4])


@check
def compute_gradients(hvd, tf, np):
    """DistributedOptimizer.compute_gradients / _compute_gradients (Horovod's Keras ones):
    the gradients come back reduced and apply_gradients applies them as given (a second
    reduction would multiply a Sum by the size), from a loss callable or a tensor on a
    tape, eagerly and in a tf.function; apply_gradients alone still reduces. Rank r's loss
    is sum((r+1) x^2): its gradient 2 (r+1) x, their sum 2 x size (size+1) / 2.
    backward_passes_per_step=2 with an infinite first cycle (Horovod's
    test_grad_aggregation_with_inf_grad): the second cycle's gradient is finite."""
    import keras

    rank, size = hvd.rank(), hvd.size()
    start = np.array([1.0, 2.0, 3.0], np.float32)
    total = size * (size + 1) / 2
    bad = []
    names = {hvd.Sum: "Sum", hvd.Average: "Average"}
    for op, how, mode in itertools.product(
        (hvd.Average, hvd.Sum), ("callable", "tape", "apply"), ("eager", "tf.function")
    ):
        x = keras.Variable(start)
        opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.5), op=op)

        def loss():
            return tf.reduce_sum(float(rank + 1) * x * x)

        def step():
            if how == "callable":
                pairs = opt._compute_gradients(loss, [x])
            elif how == "tape":
                with tf.GradientTape() as tape:
                    value = loss()
                pairs = opt.compute_gradients(value, [x], tape=tape)
            else:
                with tf.GradientTape() as tape:
                    value = loss()
                pairs = [(tape.gradient(value, x), x)]
            opt.apply_gradients(pairs)
            return pairs[0][0]

        grad = (step() if mode == "eager" else tf.function(step)()).numpy()
        want = 2 * start * (total if op == hvd.Sum else total / size)
        if how != "apply" and not np.allclose(grad, want, rtol=1e-6):
            bad.append(f"{how} {mode} {names[op]}: gradient {grad.tolist()}, expected {want.tolist()}")
        if not np.allclose(x.numpy(), start - 0.5 * want, rtol=1e-6):
            bad.append(
                f"{how} {mode} {names[op]}: applied {x.numpy().tolist()}, expected {(start - 0.5 * want).tolist()}"
            )
    steps = tf.Variable(0, trainable=False, dtype=tf.int32)
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(), backward_passes_per_step=2, sparse_as_dense=True)
    y = keras.Variable(0.0)

    def inf_first():
        steps.assign_add(1)
        return tf.cond(steps > 1, lambda: y * 1.0, lambda: y * float("inf"))

    for _ in range(4):
        pairs = opt._compute_gradients(loss=inf_first, var_list=[y])
        opt.apply_gradients(pairs)
    if not np.isfinite(pairs[0][0].numpy()):
        bad.append(f"passes=2: the second cycle's gradient is {pairs[0][0].numpy()}")
    return not bad, "; ".join(bad[:4])


@check
def sync_batch_norm(hvd, tf, np):
    """SyncBatchNormalization in training: each rank's output, moving statistics and input
    gradient equal those of BatchNormalization over the union of the ranks' batches."""
    import keras

    import rdmacoll.frameworks.tensorflow as hvdtf

    rank, size = hvd.rank(), hvd.size()
    rng = np.random.default_rng(7)
    xs = [rng.normal(r, 1 + r, size=(6, 3)).astype(np.float32) for r in range(size)]
    ws = [rng.normal(size=(6, 3)).astype(np.float32) for _ in range(size)]
    sync, plain = hvdtf.SyncBatchNormalization(momentum=0.5), keras.layers.BatchNormalization(momentum=0.5)
    x = tf.constant(xs[rank])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = sync(x, training=True)
        loss = tf.reduce_sum(tf.constant(ws[rank]) * y)
    dx = tape.gradient(loss, x)
    ux = tf.constant(np.concatenate(xs))
    with tf.GradientTape() as tape:
        tape.watch(ux)
        uy = plain(ux, training=True)
        uloss = tf.reduce_sum(tf.constant(np.concatenate(ws)) * uy)
    udx = tape.gradient(uloss, ux)
    mine = slice(6 * rank, 6 * rank + 6)
    bad = []
    if not np.allclose(y.numpy(), uy.numpy()[mine], atol=1e-4):
        bad.append("output")
    if not np.allclose(dx.numpy(), udx.numpy()[mine], atol=1e-4):
        bad.append(f"input gradient {np.abs(dx.numpy() - udx.numpy()[mine]).max():.3g}")
    for a, b, what in (
        (sync.moving_mean, plain.moving_mean, "moving mean"),
        (sync.moving_variance, plain.moving_variance, "moving variance"),
    ):
        # (BatchNormalization's moving variance uses the biased variance, as the sync one)
        if not np.allclose(np.asarray(a), np.asarray(b), atol=1e-4):
            bad.append(what)
    try:
        hvdtf.SyncBatchNormalization(fused=True)
        bad.append("fused=True accepted")
    except ValueError:
        pass
    return not bad, "; ".join(bad)


def ancestors(op):
    """Every op that op waits for (through data and control inputs)."""
    seen, todo = set(), [op]
    while todo:
        cur = todo.pop()
        for dep in [t.op for t in cur.inputs] + list(cur.control_inputs):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


@check
def graph_order(hvd, tf, np):
    """Inside tf.function every collective op waits for the one before it in program
    order, also when that one sits in a tf.cond branch, so every rank runs them in the
    same order (independent ops would otherwise be unordered). Under XLA: a clear error."""

    @tf.function
    def independent(a, b, c, flag):
        first, gathered = hvd.allreduce(a, op=hvd.Sum), hvd.allgather(b)
        d = tf.cond(flag, lambda: hvd.allreduce(c, op=hvd.Sum), lambda: c)
        return first, gathered, hvd.broadcast(c, 0), hvd.allreduce(c), d, hvd.allreduce(a, name="after_cond")

    args = [tf.constant([1.0]), tf.constant([2, 3]), tf.constant([4.0, 5.0]), tf.constant(True)]
    ops = independent.get_concrete_function(*args).graph.get_operations()
    order = [op for op in ops if op.type in ("PyFunc", "If", "StatelessIf")]
    chained = [order[i - 1] in ancestors(order[i]) for i in range(1, len(order))]
    for _ in range(20):  # and it runs, repeatedly, with the same results on every rank
        out = independent(*args)
    xla = None  # XLA cannot call Python: a clear error when traced, on every rank alike
    try:
        tf.function(lambda a: hvd.allreduce(a), jit_compile=True)(args[0])
    except hvd.RdmacollError as e:
        xla = str(e)
    ok = (
        len(order) == 6
        and all(chained)
        and float(out[0][0]) == hvd.size()
        and float(out[4][0]) == 4.0 * hvd.size()
        and xla
        and "jit_compile=False" in xla
    )
    return ok, (f"{[op.type for op in order]} each after the one before: {chained}; under XLA: {xla and xla[-200:]}")


class CountingComm:
    """Stands in for rdmacoll's communicator and counts the collectives started (but the
    announcements to joined ranks, frameworks/_join.py, that go ahead of some of them)."""

    def __init__(self, inner):
        self.inner = inner
        self.calls = []

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if name.split("_")[0] in ("allreduce", "allgather", "broadcast", "reducescatter", "alltoall"):

            def counted(*a, **k):
                if not any(isinstance(v, str) and v.startswith("join.") for v in a):
                    self.calls.append(name)
                return attr(*a, **k)

            return counted
        return attr


@check
def fusion(hvd, tf, np):
    """One step's gradients take one collective at the default fusion threshold, and
    as many as plan_buckets says at a small one (eager and tf.function)."""
    import keras
    import rdmacoll as rc
    from rdmacoll.frameworks._common import plan_buckets

    model = make_model(3)
    x, y = tf.ones((4, FEATURES)), tf.ones((4, 1))
    variables = model.trainable_variables
    sizes = [(np.float32, int(np.prod(v.shape)) * 4) for v in variables]
    results = []
    for threshold in (None, "400"):
        # The threshold is a job-wide setting, fixed at init(): join again with it.
        rc.shutdown()
        rc.init(config=None if threshold is None else {"fusion_threshold": threshold})

        def grads(x, y):
            with tf.GradientTape() as tape:
                loss = keras.losses.mean_squared_error(y, model(x))
            return hvd.DistributedGradientTape(tape).gradient(loss, variables)

        want = len(plan_buckets(sizes, 400)) if threshold else 1
        for mode, fn in (("eager", grads), ("tf.function", tf.function(grads))):
            fn(x, y)  # trace first
            session = rc._session.current()
            counter = CountingComm(session.comm)
            session.comm = counter
            try:
                fn(x, y)
            finally:
                session.comm = counter.inner
            results.append((threshold or "default", mode, len(counter.calls), want))
    rc.shutdown()
    rc.init()
    ok = all(got == want for _, _, got, want in results) and results[-1][3] > 1
    return ok, f"{len(variables)} gradients: (threshold, mode, collectives, expected) {results}"


@check
def fit_matches_union(hvd, tf, np):
    """model.fit, DistributedOptimizer: see the 'epoch' records of run 'fit'."""
    fit_run(hvd, "fit")
    return True, ""


@check
def fit_backward_passes(hvd, tf, np):
    """backward_passes_per_step=2 (averaged): equals one process on batches of
    2 passes x all ranks; see the 'epoch' records of run 'fit-passes2'."""
    opt = fit_run(hvd, "fit-passes2", passes=2)
    iterations = int(opt.iterations.numpy())
    return iterations == EPOCHS * STEPS // 2, f"optimizer iterations {iterations}"


@check
def tape_in_tf_function(hvd, tf, np):
    """A custom loop: DistributedGradientTape inside tf.function vs one process on the
    union batches; see the 'epoch' records of run 'tape'."""
    import keras

    rank, size = hvd.rank(), hvd.size()
    (x, y), (ux, uy), union_batch = dataset(rank, size)

    def train(distributed, xs, ys, batch):
        model, opt = make_model(2), keras.optimizers.Adam(0.01)

        @tf.function
        def step(xb, yb):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(keras.losses.mean_squared_error(yb, model(xb, training=True)))
            if distributed:
                tape = hvd.DistributedGradientTape(tape)
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        epochs = []
        for _ in range(EPOCHS):
            for k in range(STEPS):
                step(xs[k * batch : (k + 1) * batch], ys[k * batch : (k + 1) * batch])
            epochs.append([v.numpy().copy() for v in model.trainable_variables])
        return epochs

    report_epochs("tape", train(True, x, y, BATCH), train(False, ux, uy, union_batch))
    return True, ""


@check
def broadcast_callback(hvd, tf, np):
    """Ranks start from different random weights; BroadcastGlobalVariablesCallback(0)
    makes them rank 0's before the first batch (weights and optimizer state)."""
    import keras

    rank, size = hvd.rank(), hvd.size()
    model = make_model(100 + rank)
    initial = weights_digest(model.get_weights())
    root_initial = hvd.broadcast_object(initial, root_rank=0)
    seen = {}

    class AtStart(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            seen["weights"] = weights_digest(self.model.get_weights())
            seen["optimizer"] = weights_digest(self.model.optimizer.variables)

        def on_train_batch_begin(self, batch, logs=None):
            seen.setdefault("first_batch", weights_digest(self.model.get_weights()))

    (x, y), _, _ = dataset(rank, size)

    def fit_once(model, optimizer, callback):
        model.compile(optimizer=hvd.DistributedOptimizer(optimizer), loss="mse")
        model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0, callbacks=callback)

    fit_once(model, keras.optimizers.Adam(0.01), [hvd.callbacks.BroadcastGlobalVariablesCallback(0), AtStart()])
    emit(
        "broadcast",
        initial=initial,
        at_start=seen["weights"],
        first_batch=seen["first_batch"],
        optimizer=seen["optimizer"],
        final=weights_digest(model.get_weights()),
    )
    ok = seen["weights"] == root_initial == seen["first_batch"] and (rank == 0 or initial != root_initial)
    detail = f"initial {initial} root {root_initial} at start {seen['weights']}"

    # local_variables: the first layer's kernel keeps each rank's own value
    model = make_model(200 + rank)
    local = model.weights[0]
    mine, others = local.numpy().copy(), [w.numpy().copy() for w in model.weights[1:]]
    fit_once(
        model, keras.optimizers.SGD(0.0), [hvd.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=[local])]
    )
    root_others = hvd.broadcast_object([w.tolist() for w in others], root_rank=0)
    kept = np.array_equal(local.numpy(), mine)
    synced = all(np.array_equal(w.numpy(), np.array(r, np.float32)) for w, r in zip(model.weights[1:], root_others))
    try:
        hvd.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=[np.zeros(2)])
        refused = False
    except ValueError:
        refused = True

    # a model built lazily (no Input: built by its first step, as Horovod's
    # tensorflow2_keras_mnist.py's): broadcast at the end of the first batch, as Horovod does
    keras.utils.set_random_seed(300 + rank)
    lazy = keras.Sequential([keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)])
    fit_once(lazy, keras.optimizers.Adam(0.01), [hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    lazy_final = weights_digest(lazy.get_weights())
    lazy_same = len(set(hvd.allgather_object(lazy_final))) == 1
    ok = ok and kept and synced and refused and lazy_same
    return ok, (
        f"{detail}; local kept {kept}, others synced {synced}, a non-variable refused {refused}, "
        f"a lazily built model identical on every rank {lazy_same}"
    )


@check
def metric_average_and_warmup(hvd, tf, np):
    """MetricAverageCallback: every rank's logs hold the average over ranks.
    LearningRateWarmupCallback: lr goes from lr/size to lr over warmup_epochs."""
    import keras

    rank, size = hvd.rank(), hvd.size()
    lr, warmup = 0.02, 2
    model = make_model(4)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(lr)), loss="mse")
    per_batch = []

    class LrLog(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            per_batch.append(float(np.asarray(self.model.optimizer.learning_rate)))

    raw = {}

    class Raw(keras.callbacks.Callback):  # runs before the averaging callback
        def on_epoch_end(self, epoch, logs=None):
            raw.setdefault("loss", []).append(logs["loss"])

    (x, y), _, _ = dataset(rank, size)
    x = x * (rank + 1)  # ranks see different losses
    hist = model.fit(
        x,
        y,
        batch_size=BATCH,
        epochs=3,
        shuffle=False,
        verbose=0,
        callbacks=[
            hvd.callbacks.BroadcastGlobalVariablesCallback(0),
            Raw(),
            hvd.callbacks.MetricAverageCallback(),
            hvd.callbacks.LearningRateWarmupCallback(lr, warmup_epochs=warmup),
            LrLog(),
        ],
    )
    all_raw = hvd.allgather_object(raw["loss"])
    want_avg = np.mean(all_raw, axis=0)
    avg_ok = np.allclose(hist.history["loss"], want_avg, rtol=1e-6)
    want_lr = [
        lr / size * ((e + (b + 1) / STEPS) * (size - 1) / warmup + 1) for e in range(warmup) for b in range(STEPS)
    ]
    lr_ok = np.allclose(per_batch[: len(want_lr)], want_lr, rtol=1e-5) and np.allclose(
        per_batch[len(want_lr) :], per_batch[len(want_lr) - 1], rtol=1e-6
    )
    emit("metrics", loss=hist.history["loss"])
    return bool(avg_ok and lr_ok), f"loss {hist.history['loss']} want {want_avg.tolist()}; lr {per_batch}"


@check
def mixed_precision(hvd, tf, np):
    """Under mixed_float16, DistributedOptimizer scales the loss outside the reduction:
    model.fit trains, the ranks' weights stay identical, every rank skips the same steps."""
    import keras

    rank, size = hvd.rank(), hvd.size()
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = make_model(5)
        opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01))
        model.compile(optimizer=opt, loss="mse")
        (x, y), _, _ = dataset(rank, size)
        model.fit(
            x * (rank + 1),
            y,
            batch_size=BATCH,
            epochs=2,
            shuffle=False,
            verbose=0,
            callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)],
        )
    finally:
        keras.mixed_precision.set_global_policy("float32")
    state = (weights_digest(model.get_weights()), int(opt.iterations.numpy()), float(opt.dynamic_scale.numpy()))
    states = hvd.allgather_object(state)
    ok = isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer) and len(set(states)) == 1
    return ok, f"(weights, iterations, loss scale) per rank: {states}"


def _sets(size):
    """The process sets the process-set checks use: the even ranks and every rank but 0
    (they overlap from 3 ranks on; at 2 ranks each has one rank)."""
    return list(range(0, size, 2)), list(range(1, size))


def _reinit(**kwargs):
    """Join again (rc.init's arguments), every rank alike."""
    import rdmacoll as rc
    import rdmacoll.frameworks.tensorflow as hvdtf

    rc.shutdown()
    hvdtf.init(**kwargs)


@check
def process_sets(hvd, tf, np):
    """Every collective, the object collectives, broadcast_variables, DistributedGradientTape
    and the layout ops on process sets (init(process_sets=...) and add_process_set), eagerly
    and in tf.function, against NumPy on the set's ranks; gradients use the same set;
    ranks outside a set get InvalidArgumentError (and ValueError), as Horovod."""
    import rdmacoll.frameworks.tensorflow as hvdtf

    rank, size = hvd.rank(), hvd.size()
    evens, rest = _sets(size)
    ps_even, ps_rest = hvdtf.ProcessSet(evens), hvdtf.ProcessSet(rest)
    _reinit(process_sets=[ps_even, ps_rest])
    bad = []
    try:
        hvdtf.add_process_set([0])
        bad.append("add_process_set without dynamic process sets did not raise")
    except ValueError:
        pass

    def same(what, got, want, tol=1e-6):
        got, want = np.asarray(got), np.asarray(want)
        if got.shape != want.shape or not np.allclose(got, want, atol=tol, rtol=0):
            bad.append(f"{what}: got {got.tolist()} want {want.tolist()}")

    for ps in (ps_even, ps_rest):
        ranks, n = ps.ranks, len(ps.ranks)
        mine = np.arange(4, dtype=np.float32) * (rank + 1)
        if rank not in ranks:
            for what, call in (
                ("allreduce", lambda: hvdtf.allreduce(tf.constant(mine), process_set=ps)),
                ("allgather", lambda: hvdtf.allgather(tf.constant(mine), process_set=ps)),
                ("alltoall", lambda: hvdtf.alltoall(tf.constant(mine), process_set=ps)),
            ):
                try:
                    call()
                    bad.append(f"{what} outside {ranks}: no error")
                except tf.errors.InvalidArgumentError as e:
                    if not isinstance(e, ValueError) or "not a member" not in str(e):
                        bad.append(f"{what} outside {ranks}: {type(e).__name__} {e}")
            if int(hvdtf.process_set_included_op(ps.process_set_id)) != 0:
                bad.append(f"process_set_included_op({ranks}) on a rank outside it")
            # DistributedGradientTape on a set this rank is not in: its own gradient (Horovod)
            v = tf.Variable(mine)
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(v * v)
            same(
                f"tape outside {ranks}",
                hvdtf.DistributedGradientTape(tape, process_set=ps).gradient(loss, [v])[0],
                2 * mine,
            )
            continue
        pos, root = ranks.index(rank), ranks[-1]
        every = [np.arange(4, dtype=np.float32) * (r + 1) for r in ranks]
        total = sum(every)
        rows = [np.full((r + 1, 2), r, np.int32) for r in ranks]
        send = np.concatenate([np.full(2, 10 * rank + j, np.float32) for j in range(n)])  # 2 rows to each

        def ops(x, rws, snd, ps=ps, n=n):
            return [
                hvdtf.allreduce(x, op=hvd.Sum, process_set=ps),
                hvdtf.allreduce(x, process_set=ps),
                *hvdtf.grouped_allreduce([x, 2 * x], op=hvd.Sum, process_set=ps),
                hvdtf.allgather(rws, process_set=ps),
                hvdtf.broadcast(x, root, process_set=ps),
                hvdtf.alltoall(snd, splits=[2] * n, process_set=ps)[0],
                hvdtf.reducescatter(tf.reshape(tf.tile(x, [n]), [n, 4]), op=hvd.Sum, process_set=ps),
                hvdtf.size_op(ps.process_set_id),
                hvdtf.process_set_included_op(ps.process_set_id),
            ]

        want = [
            total,
            total / n,
            total,
            2 * total,
            np.concatenate(rows),
            every[-1],
            np.concatenate([np.full(2, 10 * r + pos, np.float32) for r in ranks]),
            total[None, :],
            n,
            1,
        ]
        for mode, fn in (("eager", ops), ("tf.function", tf.function(ops))):
            for i, (g, w) in enumerate(zip(fn(tf.constant(mine), tf.constant(rows[pos]), tf.constant(send)), want)):
                same(f"{ranks} {mode} #{i}", g, w)
        # gradients on the set (Horovod: the op's process_set_id): d/dx sum(w_r * op(x))
        wts = {r: np.arange(4, dtype=np.float32) + r for r in ranks}
        x = tf.constant(mine)

        def grads(x, ps=ps, n=n):
            with tf.GradientTape(persistent=True) as tape:
                tape.watch(x)
                ys = [
                    hvdtf.allreduce(x, process_set=ps),
                    hvdtf.broadcast(x, root, process_set=ps),
                    hvdtf.allgather(x, process_set=ps),
                ]
                losses = [
                    tf.reduce_sum(tf.constant(wts[rank]) * ys[0]),
                    tf.reduce_sum(tf.constant(wts[rank]) * ys[1]),
                    tf.reduce_sum(tf.constant(np.tile(wts[rank], n)) * ys[2]),
                ]
            return [tape.gradient(loss, x) for loss in losses]

        mean_w = sum(wts.values()) / n
        for mode, fn in (("eager", grads), ("tf.function", tf.function(grads))):
            for what, g, w in zip(
                ("allreduce", "broadcast", "allgather"), fn(x), (mean_w, mean_w * (rank == root), mean_w)
            ):
                same(f"{ranks} {mode} gradient of {what}", g, w)
        v = tf.Variable(mine)
        hvdtf.broadcast_variables([v], root_rank=root, process_set=ps)
        same(f"{ranks} broadcast_variables", v.numpy(), every[-1])
        if hvdtf.broadcast_object({"r": rank}, root_rank=root, process_set=ps) != {"r": root}:
            bad.append(f"{ranks} broadcast_object")
        if hvdtf.allgather_object(rank, process_set=ps) != ranks:
            bad.append(f"{ranks} allgather_object")
        v = tf.Variable(mine)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(v * v)
        same(f"{ranks} tape", hvdtf.DistributedGradientTape(tape, process_set=ps).gradient(loss, [v])[0], 2 * total / n)
        sl = hvdtf.allreduce(
            tf.IndexedSlices(
                tf.constant([[1.0, 2.0]]) * (rank + 1), tf.constant([pos]), dense_shape=tf.constant([n, 2])
            ),
            process_set=ps,
        )
        same(
            f"{ranks} IndexedSlices Average",
            tf.convert_to_tensor(sl),
            np.array([[(r + 1.0) / n, 2.0 * (r + 1) / n] for r in ranks], np.float32),
        )
    # dynamic sets: add, use, remove (collective over every rank)
    _reinit(process_sets="dynamic")
    ps = hvdtf.add_process_set(rest)
    if rank in rest:
        same(
            "added set allreduce",
            hvdtf.allreduce(tf.constant([float(rank)]), op=hvd.Sum, process_set=ps),
            [float(sum(rest))],
        )
    removed = hvdtf.remove_process_set(ps)
    if not removed or int(hvdtf.size_op(ps.process_set_id or 99)) != -3:
        bad.append(f"remove_process_set {removed}, size_op after it {int(hvdtf.size_op(99))}")
    _reinit()
    return not bad, "; ".join(bad[:4])


def _expect_error(bad, what, call, types, words):
    """call() must raise every type of `types` with `words` in its message."""
    try:
        call()
        bad.append(f"{what}: no error")
    except Exception as e:  # noqa: BLE001 - the types are what is checked
        if not all(isinstance(e, t) for t in types) or words not in str(e):
            bad.append(f"{what}: {type(e).__name__}: {str(e)[:200]}")


@check
def error_types(hvd, tf, np):
    """Errors as Horovod's TensorFlow ops raise them (errors.py): argument errors are
    tf.errors.InvalidArgumentError (and ValueError) eagerly, in tf.function and in a
    Session; using rdmacoll after shutdown is FailedPreconditionError; argument errors
    raised before communicating leave the job usable."""
    import rdmacoll as rc
    import rdmacoll.frameworks.tensorflow as hvdtf

    size = hvd.size()
    bad = []
    x = tf.constant(np.arange(size + 1, dtype=np.float32))
    cases = [
        (
            "bad splits",
            lambda t: hvdtf.alltoall(t, splits=[1] * (size + 1))[0],
            "Number of entries in splits does not equal number of workers.",
        ),
        ("uneven alltoall", lambda t: hvdtf.alltoall(t), "not an even multiple of the number of workers"),
        ("root outside the job", lambda t: hvdtf.broadcast(t, size), f"invalid root rank {size}"),
    ]
    for what, fn, words in cases:
        _expect_error(
            bad, f"eager {what}", lambda: fn(x), (tf.errors.InvalidArgumentError, ValueError, rc.RdmacollError), words
        )
        _expect_error(bad, f"tf.function {what}", lambda: tf.function(fn)(x), (tf.errors.InvalidArgumentError,), words)
        with tf.Graph().as_default():
            y = fn(tf.constant(np.arange(size + 1, dtype=np.float32)))
            with tf.compat.v1.Session() as sess:
                _expect_error(bad, f"Session {what}", lambda: sess.run(y), (tf.errors.InvalidArgumentError,), words)
    _expect_error(
        bad,
        "broadcast_global_variables eagerly",
        lambda: hvdtf.broadcast_global_variables(0),
        (RuntimeError,),
        "does not support eager execution",
    )
    # the core's other failures (a dead peer, a timeout) are Horovod's shut-down error, UNKNOWN
    from rdmacoll.frameworks.tensorflow.errors import as_tf_error

    for text, want in (
        ("shm: rank 1 exited (pid 7)", tf.errors.UnknownError),
        ("timed out after 600 s (RDMACOLL_TIMEOUT) on rank 0", tf.errors.UnknownError),
        ("collective mismatch (different counts): ...", tf.errors.FailedPreconditionError),
    ):
        if not isinstance(as_tf_error(rc.RdmacollError(text)), want):
            bad.append(f"{text!r} is not {want.__name__}")
    rc.shutdown()
    _expect_error(
        bad,
        "allreduce after shutdown",
        lambda: hvdtf.allreduce(x),
        (tf.errors.FailedPreconditionError, rc.RdmacollError),
        "not initialised",
    )
    _expect_error(
        bad, "size_op after shutdown", lambda: hvdtf.size_op(), (tf.errors.FailedPreconditionError,), "not initialised"
    )
    rc.init()
    if float(hvdtf.allreduce(tf.constant([1.0]), op=hvd.Sum)[0]) != size:
        bad.append("the job is not usable after the argument errors")
    return not bad, "; ".join(bad[:4])


@check
def adasum(hvd, tf, np):
    """op=Adasum (horovod.tensorflow's, CPU): allreduce of float16/32/64 eagerly and
    grouped in tf.function against the NumPy tree (tests/reference.py), a
    DistributedGradientTape with op=Adasum, and Horovod's refusals before communicating:
    a number of ranks that is not a power of two, a process set other than the global one,
    sparse tensors (NotImplementedError), integer tensors (InvalidArgumentError)."""
    import rdmacoll.frameworks.tensorflow as hvdtf
    from reference import adasum_tree

    n, r = hvdtf.size(), hvdtf.rank()
    bad = []

    def vec(q, count, seed, dt):
        return np.random.default_rng([seed, q]).standard_normal(count).astype(dt)

    def close(what, got, want, tol):
        got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
        if got.shape != want.shape or not np.all(np.abs(got - want) <= tol * (1 + np.abs(want))):
            bad.append(f"{what}: got {got.ravel()[:4]} want {want.ravel()[:4]}")

    x = tf.constant(vec(r, 5, 1, np.float32))
    if n & (n - 1):
        _expect_error(
            bad,
            "non-power-of-two size",
            lambda: hvdtf.allreduce(x, op=hvdtf.Adasum),
            (NotImplementedError,),
            "non-power of 2",
        )
        return not bad, "; ".join(bad[:4])
    tol = {np.float16: 2e-3, np.float32: 2e-6, np.float64: 1e-12}
    for dt in (np.float16, np.float32, np.float64):
        for count in (1, 7, 1000):
            got = hvdtf.allreduce(tf.constant(vec(r, count, count, dt)), op=hvdtf.Adasum)
            close(
                f"allreduce {np.dtype(dt).name} {count}",
                got.numpy(),
                adasum_tree([vec(q, count, count, dt) for q in range(n)], dt),
                tol[dt],
            )
    grouped = tf.function(lambda a, b: hvdtf.grouped_allreduce([a, b], op=hvdtf.Adasum))(
        tf.constant(vec(r, 11, 6, np.float32)), tf.constant(vec(r, 4, 7, np.float32))
    )
    for i, (count, seed) in enumerate(((11, 6), (4, 7))):  # each tensor its own coefficients
        close(
            f"grouped in tf.function {i}",
            grouped[i].numpy(),
            adasum_tree([vec(q, count, seed, np.float32) for q in range(n)], np.float32),
            tol[np.float32],
        )
    w = tf.Variable(np.ones(6, np.float32))
    with tf.GradientTape() as tape:  # d/dw of sum(w * v_r) is v_r
        loss = tf.reduce_sum(w * tf.constant(vec(r, 6, 9, np.float32)))
    (g,) = hvdtf.DistributedGradientTape(tape, op=hvdtf.Adasum).gradient(loss, [w])
    close(
        "DistributedGradientTape",
        g.numpy(),
        adasum_tree([vec(q, 6, 9, np.float32) for q in range(n)], np.float32),
        tol[np.float32],
    )
    _expect_error(
        bad,
        "process set",
        lambda: hvdtf.allreduce(x, op=hvdtf.Adasum, process_set=hvd.ProcessSet([0])),
        (NotImplementedError,),
        "non-global process sets",
    )
    sparse = tf.IndexedSlices(tf.constant([[1.0]]), tf.constant([0], tf.int64), tf.constant([2, 1], tf.int64))
    _expect_error(
        bad, "sparse", lambda: hvdtf.allreduce(sparse, op=hvdtf.Adasum), (NotImplementedError,), "sparse_as_dense=True"
    )
    _expect_error(
        bad,
        "int32",
        lambda: hvdtf.allreduce(tf.constant([1, 2]), op=hvdtf.Adasum),
        (tf.errors.InvalidArgumentError, ValueError),
        "Adasum",
    )
    if float(hvdtf.allreduce(tf.constant([1.0]), op=hvd.Sum)[0]) != n:
        bad.append("the job is not usable after the refused calls")
    return not bad, "; ".join(bad[:4])


@check
def init_comm(hvd, tf, np):
    """hvd.init(comm=...) as Horovod's: a list of MPI_COMM_WORLD ranks (the job is those
    ranks in the list's order; a rank outside it gets ValueError) and an mpi4py
    communicator (the job is its ranks); then the whole launch again."""
    import rdmacoll as rc
    import rdmacoll.frameworks.tensorflow as hvdtf
    from mpi4py import MPI

    world, n = MPI.COMM_WORLD.rank, MPI.COMM_WORLD.size
    bad = []
    rc.shutdown()
    order = list(range(n - 1, 0, -1))  # every rank but 0, reversed
    if world == 0:
        _expect_error(bad, "rank outside comm", lambda: hvdtf.init(comm=order), (ValueError,), "")
    else:
        hvdtf.init(comm=order)
        if (hvdtf.rank(), hvdtf.size()) != (order.index(world), n - 1):
            bad.append(f"comm={order}: rank {hvdtf.rank()} size {hvdtf.size()} on world rank {world}")
        got = float(hvdtf.allreduce(tf.constant([float(world)]), op=hvdtf.Sum)[0])
        if got != sum(order):
            bad.append(f"comm={order}: allreduce {got}, want {sum(order)}")
        rc.shutdown()
    MPI.COMM_WORLD.Barrier()
    split = MPI.COMM_WORLD.Split(world % 2, world)
    hvdtf.init(comm=split)
    want = sum(q for q in range(n) if q % 2 == world % 2)
    if (hvdtf.size(), float(hvdtf.allreduce(tf.constant([float(world)]), op=hvdtf.Sum)[0])) != (split.size, want):
        bad.append(f"split communicator: size {hvdtf.size()}, want {split.size} and a sum of {want}")
    rc.shutdown()
    split.Free()
    hvdtf.init()
    if hvdtf.size() != n:
        bad.append("init() after comm= did not give the whole launch")
    return not bad, "; ".join(bad[:4])


@check
def session_graphs(hvd, tf, np):
    """TF1 graphs run by tf.compat.v1.Session (_graph.py, _session_order.py): one collective
    per run, several independent collectives fetched together (run repeatedly), a
    tf.compat.v1.train DistributedOptimizer train op after broadcast_global_variables and
    under MonitoredTrainingSession with BroadcastGlobalVariablesHook, registered gradients
    (tf.gradients) and a process set, against NumPy on every rank."""
    import rdmacoll.frameworks.tensorflow as hvdtf

    rank, size = hvd.rank(), hvd.size()
    bad = []

    def same(what, got, want, tol=1e-5):
        got, want = np.asarray(got), np.asarray(want)
        if got.shape != want.shape or not np.allclose(got, want, atol=tol, rtol=0):
            bad.append(f"{what}: got {got.tolist()} want {want.tolist()}")

    mine = np.arange(4, dtype=np.float32) * (rank + 1)
    total = sum(np.arange(4, dtype=np.float32) * (r + 1) for r in range(size))
    gathered = np.concatenate([np.full((r + 1, 2), r, np.float32) for r in range(size)])
    with tf.Graph().as_default():
        x = tf.compat.v1.placeholder(tf.float32, [4])
        rows = tf.compat.v1.placeholder(tf.float32, [None, 2])
        ops = {
            "allreduce": (hvdtf.allreduce(x, op=hvd.Sum), total),
            "allgather": (hvdtf.allgather(rows), gathered),
            "broadcast": (hvdtf.broadcast(x, size - 1), np.arange(4, dtype=np.float32) * size),
            "average": (hvdtf.allreduce(x), total / size),
            "reducescatter": (
                hvdtf.reducescatter(tf.reshape(tf.tile(x, [size]), [size, 4]), op=hvd.Sum),
                total[None, :],
            ),
        }
        # registered gradients: d/dx of sum(w * allreduce(x)) and of a broadcast, by tf.gradients
        w = np.arange(4, dtype=np.float32) + rank
        mean_w = sum(np.arange(4, dtype=np.float32) + r for r in range(size)) / size
        (g_avg,) = tf.gradients(tf.reduce_sum(w * hvdtf.allreduce(x)), [x])
        (g_bc,) = tf.gradients(tf.reduce_sum(w * hvdtf.broadcast(x, 0)), [x])
        # chains (a collective of a collective's result) beside an independent one: a
        # collective whose input waits for another's result must not wait behind a third
        chains = [
            hvdtf.allreduce(hvdtf.allreduce(x, op=hvd.Sum), op=hvd.Sum),
            hvdtf.broadcast(hvdtf.allreduce(2 * x, op=hvd.Sum), size - 1),
            hvdtf.allreduce(3 * x, op=hvd.Sum),
        ]
        feed = {x: mine, rows: np.full((rank + 1, 2), rank, np.float32)}
        config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=2, use_per_session_threads=True)
        with tf.compat.v1.Session(config=config) as sess:
            for name, (op, want) in ops.items():  # one collective per run
                same(f"alone {name}", sess.run(op, feed), want)
            for step in range(10):  # all fetched together: the order is agreed at run time
                got = sess.run([op for op, _ in ops.values()], feed)
                for name, g, (_, want) in zip(ops, got, ops.values()):
                    same(f"together {name} run {step}", g, want)
            for step in range(5):
                got = sess.run(chains, feed)
                for what, g, want in zip(
                    ("chain", "chain 2", "beside them"), got, (size * total, 2 * total, 3 * total)
                ):
                    same(f"{what} run {step}", g, want)
            same("tf.gradients of allreduce", sess.run(g_avg, feed), mean_w)
            same("tf.gradients of broadcast", sess.run(g_bc, feed), mean_w * (rank == 0))
        with tf.compat.v1.Session() as sess:  # default config: two independent collectives per run
            for step in range(5):
                a, b = sess.run([ops["allreduce"][0], ops["allgather"][0]], feed)
                same(f"default session allreduce {step}", a, total)
                same(f"default session allgather {step}", b, gathered)

    # linear regression: per-rank data, averaged gradients, against NumPy
    lr, steps = 0.1, 4
    data = [
        (
            np.random.default_rng(r).normal(size=(8, 3)).astype(np.float32),
            np.random.default_rng(100 + r).normal(size=(8, 1)).astype(np.float32),
        )
        for r in range(size)
    ]
    w_np = np.full((3, 1), 0.5, np.float32)  # rank 0's initial weights (broadcast to all)
    history = []
    for _ in range(steps):
        g = sum(2 * xd.T @ (xd @ w_np - yd) / len(xd) for xd, yd in data) / size
        w_np = w_np - lr * g
        history.append(w_np.copy())

    def regression(use_hook):
        graph = tf.Graph()
        with graph.as_default():
            xd, yd = (tf.constant(a) for a in data[rank])
            wv = tf.compat.v1.get_variable("w", initializer=tf.constant(np.full((3, 1), 0.5 + rank, np.float32)))
            loss = tf.reduce_mean((tf.matmul(xd, wv) - yd) ** 2)
            opt = hvdtf.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(lr))
            train = opt.minimize(loss)
            seen = []
            if use_hook:
                hooks = [hvdtf.BroadcastGlobalVariablesHook(0)]
                with tf.compat.v1.train.MonitoredTrainingSession(hooks=hooks) as sess:
                    for _ in range(steps):
                        sess.run(train)
                        seen.append(sess.run(wv))
            else:
                bcast = hvdtf.broadcast_global_variables(0)
                with tf.compat.v1.Session() as sess:
                    sess.run(tf.compat.v1.global_variables_initializer())
                    sess.run(bcast)
                    for _ in range(steps):
                        sess.run(train)
                        seen.append(sess.run(wv))
        return seen

    for use_hook in (False, True):
        for k, (got, want) in enumerate(zip(regression(use_hook), history)):
            same(f"train op (hook={use_hook}) step {k}", got, want)

    # a process set in a Session: every rank but 0
    _, rest = _sets(size)
    ps = hvdtf.ProcessSet(rest)
    _reinit(process_sets=[ps])
    if rank in rest:
        with tf.Graph().as_default():
            x = tf.compat.v1.placeholder(tf.float32, [4])
            y, z = hvdtf.allreduce(x, op=hvd.Sum, process_set=ps), hvdtf.allgather(x, process_set=ps)
            with tf.compat.v1.Session() as sess:
                for step in range(3):
                    a, b = sess.run([y, z], {x: mine})
                    same(f"set {rest} allreduce {step}", a, sum(np.arange(4, dtype=np.float32) * (r + 1) for r in rest))
                    same(
                        f"set {rest} allgather {step}",
                        b,
                        np.concatenate([np.arange(4, dtype=np.float32) * (r + 1) for r in rest]),
                    )
    _reinit()
    return not bad, "; ".join(bad[:4])


@check
def join_serves_allreduce(hvd, tf, np):
    """hvd.join() (issue 14, item 6): the ranks but 0 join at once; rank 0 goes on with
    allreduce (eagerly and in tf.function: the joined ranks add zeros and Average divides
    by the size, as Horovod's do), grouped_allreduce, a DistributedGradientTape step, two
    allreduces in a TF1 Session (its ordering rounds are served too) and an allgather, which raises Horovod's error; join() returns the last rank to join (0),
    on every rank, and collectives work afterwards."""
    import rdmacoll.frameworks.tensorflow as tf_hvd  # (join is not in Horovod's keras module)

    rank, size = hvd.rank(), hvd.size()
    got, want = {}, {}
    if rank == 0:
        x = tf.constant([1.0, -2.0, 3.5])
        got["sum"] = hvd.allreduce(x, op=hvd.Sum).numpy().tolist()
        want["sum"] = [1.0, -2.0, 3.5]
        got["average"] = hvd.allreduce(x).numpy().tolist()
        want["average"] = (np.array([1.0, -2.0, 3.5], np.float32) / size).tolist()
        in_function = tf.function(lambda t: hvd.allreduce(t, op=hvd.Max, name="joined.max"))
        got["in tf.function"] = in_function(x).numpy().tolist()
        want["in tf.function"] = [1.0, 0.0, 3.5]  # the joined ranks' zeros take part
        grouped = hvd.grouped_allreduce([x, tf.constant([4, 5], tf.int32)], op=hvd.Sum)
        got["grouped"] = [g.numpy().tolist() for g in grouped]
        want["grouped"] = [[1.0, -2.0, 3.5], [4, 5]]
        v = tf.Variable([1.0, 3.0])
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(v * v)
        got["tape"] = hvd.DistributedGradientTape(tape).gradient(loss, [v])[0].numpy().tolist()
        want["tape"] = [2.0 / size, 6.0 / size]
        with tf.Graph().as_default():  # a TF1 session's ordering rounds, served too
            a = hvd.allreduce(tf.constant([1.0, 2.0]), op=hvd.Sum, name="joined.session.a")
            b = hvd.allreduce(tf.constant([3.0]), op=hvd.Sum, name="joined.session.b")
            with tf.compat.v1.Session() as sess:
                got["TF1 session"] = [r.tolist() for r in sess.run([a, b])]
        want["TF1 session"] = [[1.0, 2.0], [3.0]]
        try:
            hvd.allgather(x)
            got["allgather"] = "no error"
        except RuntimeError as e:
            got["allgather"] = str(e).split(" (")[0]
        want["allgather"] = (
            "Allgather is not supported with Join at this time. Specify "
            "sparse_to_dense=True if using DistributedOptimizer"
        )
    got["join"] = int(tf_hvd.join())
    want["join"] = 0
    got["after"] = hvd.allreduce(tf.ones([2]), op=hvd.Sum).numpy().tolist()
    want["after"] = [float(size)] * 2
    return got == want, f"got {got}, want {want}"


@check
def mismatch_raises(hvd, tf, np):
    """Ranks whose models differ get an error naming the mismatch, not a hang:
    tf.errors.FailedPreconditionError (Horovod's type for it) eagerly, inside tf.function
    and in a TF1 Session (errors.raise_in_graph), with rdmacoll's text. The models differ
    in a shape only (rank 0 a 2x3 variable, the others 3x2: the same count; Horovod:
    "Mismatched allreduce tensor shapes"). After each, hvd.init() builds the world again,
    as Horovod's job goes on after a mismatch: the next allreduce sums right."""
    v = tf.Variable(tf.ones([2, 3] if hvd.rank() == 0 else [3, 2]))
    size = hvd.size()

    def grads():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(v * v)
        return hvd.DistributedGradientTape(tape).gradient(loss, [v])

    def in_session():
        with tf.Graph().as_default():
            y = hvd.allreduce(tf.ones([2, 3] if hvd.rank() == 0 else [3, 2]), op=hvd.Sum)
            with tf.compat.v1.Session() as sess:
                return sess.run(y)

    seen = []
    for mode, fn in (("eager", grads), ("tf.function", tf.function(grads)), ("Session", in_session)):
        try:
            fn()
            seen.append((mode, "no error", False))
        except Exception as e:  # noqa: BLE001 - the type is checked below
            text = str(e)
            seen.append(
                (
                    mode,
                    f"{type(e).__name__}: ...{text[-300:]}",
                    isinstance(e, tf.errors.FailedPreconditionError)
                    and "collective mismatch (different shapes)" in text,
                )
            )
        hvd.init()
        total = float(hvd.allreduce(tf.constant([1.0]), op=hvd.Sum)[0])
        if total != size:
            seen.append((mode, f"after init(): allreduce gave {total}, not {size}", False))
    return all(ok for _, _, ok in seen), "; ".join(f"{m}: {t}" for m, t, _ in seen)


def _horovod_scale(np, x, factor):
    """Horovod's ScaleBuffer (horovod/common/ops/collective_operations.cc, CPU) in NumPy:
    integers in float64, truncated; float16 in float32; float32 and float64 in their own."""
    if x.dtype.kind in "iu":
        return np.trunc(x.astype(np.float64) * factor).astype(np.int64).astype(x.dtype)
    if x.dtype == np.float16:
        return (x.astype(np.float32) * np.float32(factor)).astype(np.float16)
    return (x * x.dtype.type(factor)).astype(x.dtype)


@check
def horovod_arithmetic(hvd, tf, np):
    """What Horovod's own TensorFlow tests found different (issue 37), against NumPy:
    prescale_factor / postscale_factor of allreduce, reducescatter and grouped_reducescatter
    for integer and float dtypes (Horovod scales integers in float64, truncating, and
    float16 in float32: see _horovod_scale); scalar reducescatter refused before anything
    is sent; grouped_allreduce of tf.IndexedSlices mixed with dense tensors (Sum, Average;
    Min raises NotImplementedError); and a TF1 Session fetching 21 independent collectives
    in one run (Horovod's "fused" tests)."""
    import rdmacoll.frameworks.tensorflow as hvd  # (the keras module has no grouped_* ops, as Horovod's)

    size, rank = hvd.size(), hvd.rank()
    bad = []
    factor = 0.3719
    rows = 2 * size + 1
    for dt in (np.uint8, np.int8, np.int32, np.int64, np.float16, np.float32, np.float64):
        base = np.arange(rows * 3).reshape(rows, 3) % (2 if dt in (np.uint8, np.int8) else 50)
        x = (base + (rank if dt not in (np.uint8, np.int8) else 0)).astype(dt)
        xs = [(base + (r if dt not in (np.uint8, np.int8) else 0)).astype(dt) for r in range(size)]
        exact = dt in (np.uint8, np.int8, np.int32, np.int64) or size == 2
        wide = np.int64 if np.dtype(dt).kind in "iu" else np.float64
        want_pre = sum(_horovod_scale(np, a, factor).astype(wide) for a in xs).astype(dt)
        want_post = _horovod_scale(np, sum(a.astype(wide) for a in xs).astype(dt), factor)
        lo = (rows // size) * rank + min(rank, rows % size)
        hi = lo + rows // size + (rank < rows % size)
        for what, got, want in (
            ("allreduce prescale", hvd.allreduce(x, op=hvd.Sum, prescale_factor=factor), want_pre),
            ("allreduce postscale", hvd.allreduce(x, op=hvd.Sum, postscale_factor=factor), want_post),
            # Average with a postscale factor: Sum, then one multiply by factor / size (Horovod's core)
            (
                "allreduce Average postscale",
                hvd.allreduce(x, op=hvd.Average, postscale_factor=factor),
                _horovod_scale(np, sum(a.astype(wide) for a in xs).astype(dt), factor / size),
            ),
            ("reducescatter prescale", hvd.reducescatter(x, op=hvd.Sum, prescale_factor=factor), want_pre[lo:hi]),
            ("reducescatter postscale", hvd.reducescatter(x, op=hvd.Sum, postscale_factor=factor), want_post[lo:hi]),
            (
                "grouped_reducescatter postscale",
                hvd.grouped_reducescatter([x, x], op=hvd.Sum, postscale_factor=factor)[1],
                want_post[lo:hi],
            ),
        ):
            got = np.asarray(got).astype(np.float64)
            want = np.asarray(want).astype(np.float64)
            tol = 0 if exact or "post" in what else 1e-2 * np.abs(want).max()
            if got.shape != want.shape or np.abs(got - want).max(initial=0) > tol:
                bad.append(f"{what} {np.dtype(dt).name}: {got.ravel()[:5]} vs {want.ravel()[:5]}")
    scalar = tf.constant(float(rank))
    for what, fn in (
        ("reducescatter", lambda: hvd.reducescatter(scalar)),
        ("grouped_reducescatter", lambda: hvd.grouped_reducescatter([scalar])),
        ("allgather", lambda: hvd.allgather(scalar)),
        ("grouped_allgather", lambda: hvd.grouped_allgather([scalar])),
        ("alltoall", lambda: hvd.alltoall(scalar)),
    ):
        for mode, call in (("eager", fn), ("tf.function", tf.function(fn))):
            _expect_error(bad, f"{mode} {what} of a scalar", call, (ValueError,), "scalar")
    # grouped_allreduce with tf.IndexedSlices: rows rank and rank+1 of a 3-row variable
    values = [tf.constant(np.full((2, 4), k + 1.0, np.float32)) for k in range(3)]
    sparse = [
        tf.IndexedSlices(v, tf.constant([rank, rank + 1]), dense_shape=tf.constant([size + 1, 4])) for v in values
    ]
    for op, scale in ((hvd.Sum, 1.0), (hvd.Average, 1.0 / size)):
        out = hvd.grouped_allreduce(sparse + values, op=op)
        for k in range(3):
            dense = tf.math.unsorted_segment_sum(out[k].values, out[k].indices, size + 1).numpy()
            want = np.zeros((size + 1, 4))
            for r in range(size):
                want[r : r + 2] += (k + 1.0) * scale
            if not isinstance(out[k], tf.IndexedSlices) or not np.allclose(dense, want):
                bad.append(f"grouped_allreduce IndexedSlices op {op}: {dense.tolist()} vs {want.tolist()}")
            if not np.allclose(out[3 + k].numpy(), (k + 1.0) * size * scale):
                bad.append(f"grouped_allreduce dense beside IndexedSlices op {op}: {out[3 + k].numpy()[0]}")
    _expect_error(
        bad,
        "grouped_allreduce IndexedSlices Min",
        lambda: hvd.grouped_allreduce(sparse + values, op=hvd.Min),
        (NotImplementedError,),
        "Only Sum and Average",
    )
    # grouped_allgather / grouped_reducescatter and their gradients in a TF1 Session on 2
    # inter-op threads: one op each way, whatever the number of tensors (a list of ops,
    # each holding a thread until its turn, could not finish there)
    with tf.Graph().as_default():
        xs = [tf.constant(np.full((rank + 1 + k, 2), rank + k, np.float32)) for k in range(5)]
        gathered = hvd.grouped_allgather(xs)
        scattered = hvd.grouped_reducescatter([tf.tile(x[:1], [size, 1]) for x in xs], op=hvd.Sum)
        grads = tf.gradients([tf.reduce_sum(g) for g in gathered] + [tf.reduce_sum(s) for s in scattered], xs)
        # an integer tensor beside: no gradient flows to it (None upstream), the float one's still does
        mixed = hvd.grouped_allgather([xs[0], tf.constant([rank], tf.int32)])
        mixed_grad = tf.gradients(tf.reduce_sum(mixed[0]), xs[0])
        config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=2, use_per_session_threads=True)
        with tf.compat.v1.Session(config=config) as sess:
            g_out, s_out, d_out = sess.run([gathered, scattered, grads])
            m_out, m_grad = sess.run([mixed, mixed_grad])
    if m_out[1].tolist() != list(range(size)) or not np.allclose(m_grad[0], 1.0):
        bad.append(f"Session grouped_allgather float + int: {m_out[1].tolist()}, gradient {m_grad[0].ravel()[:3]}")
    for k in range(5):
        want = np.concatenate([np.full((r + 1 + k, 2), r + k, np.float32) for r in range(size)])
        if not np.array_equal(g_out[k], want):
            bad.append(f"Session grouped_allgather #{k}: {g_out[k].ravel()[:4]} vs {want.ravel()[:4]}")
        if not np.all(s_out[k] == sum(r + k for r in range(size))) or s_out[k].shape != (1, 2):
            bad.append(f"Session grouped_reducescatter #{k}: {s_out[k].tolist()}")
        # d/dx sum(allgather(x)) = rows of Average-allreduce(ones) = 1; d/dx sum(reducescatter(tile(x[:1]))):
        # Sum's backward allgathers dy * size, rows 0 of each rank's tile: size * size on row 0
        want_d = np.ones((rank + 1 + k, 2), np.float32)
        want_d[0] += size * size
        if not np.allclose(d_out[k], want_d):
            bad.append(f"Session grouped gradients #{k}: {d_out[k].tolist()} vs {want_d.tolist()}")
    # Horovod's fused tests in a TF1 Session: 21 allreduces and 21 allgathers, independent,
    # fetched together, which each rank's executor starts in its own order, on 2 inter-op
    # threads (_session_order.py: submitted at once, waited for in a critical section)
    with tf.Graph().as_default():
        tensors = [tf.constant(np.full([17] * (1 + k % 3), k + rank, np.float32)) for k in range(21)]
        sums = [hvd.allreduce(t, op=hvd.Sum) for t in tensors]
        gathers = [hvd.allgather(t[: rank + 1]) for t in tensors]
        config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=2, use_per_session_threads=True)
        with tf.compat.v1.Session(config=config) as sess:
            for _ in range(2):
                got, got_gathers = sess.run([sums, gathers])
    for k, (g, a) in enumerate(zip(got, got_gathers)):
        want = k * size + size * (size - 1) / 2
        if not np.all(g == want):
            bad.append(f"Session, 42 collectives in one run: allreduce #{k} gave {g.ravel()[0]}, not {want}")
        want_rows = np.concatenate([np.full(r + 1, k + r, np.float32) for r in range(size)])
        if a.shape[0] != len(want_rows) or not np.all(a.reshape(len(want_rows), -1).T == want_rows):
            bad.append(f"Session, 42 collectives in one run: allgather #{k} gave {a.reshape(a.shape[0], -1)[:, 0]}")
    return not bad, "; ".join(bad[:4])


def body():
    tf = setup_tf()
    import numpy as np

    import rdmacoll.frameworks.tensorflow.keras as hvd

    hvd.init()
    set_rank(hvd.rank())
    emit("versions", tensorflow=tf.__version__, keras=__import__("keras").__version__)
    only = sys.argv[1:]
    for fn in CHECKS:
        if only and fn.__name__ not in only:
            continue
        ok, detail = fn(hvd, tf, np)
        emit("check", name=fn.__name__, ok=bool(ok), detail=detail)
    emit("done", checks=len(CHECKS))


if __name__ == "__main__":
    main(body)
