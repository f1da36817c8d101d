"""DistributedOptimizer: gradients reduced in buckets of library memory while backward
still runs.

- Gradients are views into buckets (buckets.py); a gradient hook
  (Tensor.register_post_accumulate_grad_hook) marks each one ready. When zero_grad()
  set it to None (PyTorch 2.x's default), autograd hands a fresh tensor: the hook copies
  it into its bucket (streaming stores from 1 MiB on: the bucket is read next by the
  reduction, not from this core's cache) and points .grad back at the view (counted in
  `stats["copies"]`); the fresh tensor is freed at once, so the next layer's gradient
  reuses its memory instead of faulting in new pages.
- Buckets are launched strictly in bucket order once all their gradients are ready, the
  same order on every rank, so no negotiation is needed; step() waits for them.
- Gradients that did not arrive (unused parameters, fewer backward passes than
  backward_passes_per_step) are reduced at step() like Horovod does (zeros when absent).
- Parameters that do not require gradients are not reduced and get no hook; when
  requires_grad changes or add_param_group brings parameters, the buckets are rebuilt at
  the next backward (same on every rank), so unfrozen and added parameters are reduced too
  (Horovod 0.28.1 leaves both unreduced: its ranks drift apart; docs/torch.md).
- Sparse gradients (Embedding(sparse=True)), as Horovod reduces them: by default each is
  allgathered (sparse.py: indices and values of every rank; the parameter's .grad becomes
  that sparse sum, divided by the size for Average), launched after the buckets in
  parameter order once backward ends; a parameter is known sparse from its first sparse
  gradient and leaves the buckets at the next step (until then its bucket slot carries
  zeros). A rank without its gradient in a step sends an empty one. sparse_as_dense=True
  densifies them into their bucket instead, and .grad is the reduced gradient made sparse
  again (Tensor.to_sparse(), as Horovod), so SparseAdam works with either.
- process_set: buckets are reduced over the set's ranks (Average divides by its size);
  on ranks outside it, as in Horovod, nothing is reduced: step() applies the local
  gradients. hvd.join() serves only optimizers of the global set.
- hvd.join() (../_join.py) costs the optimizer nothing: its buckets are plain allreduces
  and its sparse gradients plain allgathers, launched as always; a rank in join() learns
  each from the call itself and takes part with zeros (an empty sparse gradient). Its
  parameters are not updated (as in Horovod). A rebuild's check of the parameters
  compares the training ranks' (a joined rank has no part in it); after a join() every
  rank rebuilds and checks at its next step, so a rank that was joined through the
  others' rebuild catches up with them. Building one while a rank is joined is refused,
  as Horovod refuses allgathers.
- A rank that calls step() without backward, or a hook that fires more often than
  backward_passes_per_step allows (reentrant checkpointing), raises RdmacollError; the
  first case is made visible to the other ranks through a collective whose name says it.
"""

from __future__ import annotations

import contextlib
import time
import warnings

import torch

import rdmacoll as rc
from rdmacoll import RdmacollError, _session

from .._common import first_difference, fusion_threshold, signature_digest
from ._params import collect_params, name_params
from ._rules import RULES, as_horovod, reraise
from ._tensors import contiguous, copy_into, to_core
from .buckets import Layout
from .compression import Compression
from .. import _join as joinable
from .adasum_optimizer import adasum_optimizer
from .ops import comm_of, global_process_set
from .sparse import served_sparse_allreduce_async

# Horovod's text (UserWarning), for step() after synchronize() outside skip_synchronize()
_STEP_AFTER_SYNCHRONIZE = (
    "optimizer.step() called without optimizer.skip_synchronize() context after "
    "optimizer.synchronize(). This can cause training slowdown. You may want to consider "
    "using optimizer.skip_synchronize() context if you use optimizer.synchronize() in your code."
)

# Collective names reach error messages cut to 15 characters: keep them short.
NO_BACKWARD = "no backward()"


class _DistributedOptimizer:
    """Mixed in before the user's optimizer class (isinstance checks keep working)."""

    # ------------------------------------------------------------------ set-up
    def _rc_setup(
        self,
        named_parameters,
        compression,
        backward_passes_per_step,
        op,
        gradient_predivide_factor,
        process_set,
        sparse_as_dense=False,
    ):
        RULES.check_optimizer(op, gradient_predivide_factor, backward_passes_per_step, ops=(rc.Average, rc.Sum))
        self._rc_compression = compression
        self._rc_passes = backward_passes_per_step
        self._rc_op = op
        self._rc_predivide = float(gradient_predivide_factor)
        self._rc_sparse_as_dense = bool(sparse_as_dense)
        self._rc_sparse = {}  # id(param) -> sparse_dim, for parameters whose gradient came sparse
        self._rc_set = None if process_set is global_process_set else process_set
        self._rc_excluded = self._rc_set is not None and not process_set.included()
        self._rc_size = rc.size() if self._rc_set is None else process_set.size()
        # rank 0's setting (broadcast at init): ranks with different bucket plans could
        # not reduce together
        self._rc_threshold = fusion_threshold()
        self._rc_params = collect_params(self)
        self._rc_names = name_params(named_parameters, self._rc_params, self.param_groups)
        self._rc_hooks = {}  # id(param) -> hook handle: parameters that require gradients
        self.stats = {
            "copies": 0,
            "steps": 0,
            "launched_in_backward": 0,
            "launched_in_step": 0,
            "wait_s": 0.0,
            "rebuilds": 0,
        }
        self._rc_session = None  # the session this optimizer's steps began on (_rc_begin_step)
        if self._rc_excluded:  # outside the set: no hooks, no buckets, step() is the optimizer's
            self._rc_layout = Layout([], self._rc_threshold)
            self._rc_reset()
            return
        # (elastic jobs: at the first step of each world, _rc_begin_step)
        self._rc_build(check_ranks=not _session.require().elastic)

    def _rc_hook_params(self):
        """A gradient hook on every parameter that requires gradients and has none yet
        (frozen ones cannot take one; they get it once unfrozen)."""
        for p in self._rc_params:
            if p.requires_grad and id(p) not in self._rc_hooks:
                self._rc_hooks[id(p)] = p.register_post_accumulate_grad_hook(self._rc_hook)

    def add_param_group(self, param_group):
        """torch.optim's, then the new parameters join the reduction (the buckets are
        rebuilt at the next backward, on every rank alike)."""
        super().add_param_group(param_group)
        if "_rc_params" not in self.__dict__ or self._rc_excluded:
            return  # called by the optimizer's own __init__, or outside the process set
        self._rc_params = collect_params(self)
        group = len(self.param_groups) - 1
        for i, p in enumerate(self.param_groups[-1]["params"]):
            self._rc_names.setdefault(id(p), f"param_groups.{group}.{i}")
        self._rc_hook_params()

    @property
    def _parameter_names(self):
        """Horovod's {parameter: name} (scripts read it): every parameter of the optimizer."""
        return {p: self._rc_names[id(p)] for p in self._rc_params}

    def _rc_gathered(self, p):
        """Whether p's gradient is reduced by allgather (sparse, sparse_as_dense=False)."""
        return not self._rc_sparse_as_dense and id(p) in self._rc_sparse

    def _rc_signature(self):
        return [
            (
                self._rc_names[id(p)],
                tuple(p.shape),
                str(p.dtype).replace("torch.", ""),
                bool(p.requires_grad),
                self._rc_gathered(p),
            )
            for p in self._rc_params
        ]

    def _rc_layout_key(self):
        return [(id(p), p.dtype, p.shape, p.stride(), p.requires_grad, self._rc_gathered(p)) for p in self._rc_params]

    def _rc_check_ranks(self, rows, served):
        """Every rank has the same parameters (else RdmacollError naming the first
        difference). served (a step's rebuild): a rank inside hvd.join() has no part in the
        lists (it stands in with none: ../_join.py), so the training ranks are checked;
        otherwise (construction) refused while a rank is joined, as Horovod's allgather."""
        gather = rc.allgather_object if served else joinable.allgather_object
        with as_horovod():  # (a peer lost here: HorovodInternalError, as at any collective)
            digests = gather(signature_digest(rows), name="DistributedOptimizer.check", process_set=self._rc_set)
            if len(set(digests)) == 1:
                return
            lists = gather(rows, name="DistributedOptimizer.params", process_set=self._rc_set)
        diff = first_difference(lists)
        i, per_rank = diff
        who = "rank " if len(lists) == self._rc_size else "training rank #"  # (joined ranks: not listed)
        desc = "; ".join(f"{who}{r}: {v if v is not None else 'no such parameter'}" for r, v in per_rank.items())
        raise RdmacollError(
            f"DistributedOptimizer: the model differs between ranks; first "
            f"difference at parameter #{i} (name, shape, dtype, requires_grad, "
            f"sparse gradient): {desc}"
        )

    def _rc_build(self, check_ranks, served=False):
        """(Re)build the buckets from the parameters as they are now; gradients move in."""
        if check_ranks:
            self._rc_check_ranks(self._rc_signature(), served)
        self._rc_key = self._rc_layout_key()
        self._rc_joins = joinable.STATE.episode  # (joins on this session so far: _rc_begin_step)
        self._rc_hook_params()
        self._rc_layout = Layout([p for p in self._rc_params if not self._rc_gathered(p)], self._rc_threshold)
        for bucket in self._rc_layout.buckets:
            for p, view in zip(bucket.params, bucket.views):
                g = p.grad
                if g is not None and g.shape == view.shape:
                    view.copy_(g.to_dense() if g.is_sparse else g)
                p.grad = view
        self._rc_reset()

    def _rc_reset(self):
        self._rc_counts = {}
        for bucket in self._rc_layout.buckets:
            bucket.ready, bucket.handle = 0, None
        self._rc_next = 0
        self._rc_pass = 0
        self._rc_cb_queued = False
        self._rc_started = False
        self._rc_synchronized = False
        self._rc_sparse_handles = None  # this step's sparse reductions: [(param, handle)]

    def _rc_abandon(self):
        """The session this step began on closed: its handles go with it."""
        self._rc_reset()

    def _rc_begin_step(self):
        # A step begun on one session and left unfinished (a collective failed: elastic
        # training's reset) is abandoned when that session closes. In an elastic job every
        # world checks the ranks' parameters at its first step (a worker that joins builds
        # its optimizer in a world the others are already in).
        session = _session.require()
        first_of_world = self._rc_session is not session and session.elastic
        if self._rc_session is not session:
            session.on_reset(self._rc_abandon)
            self._rc_session = session
        # A join() since the last build: a rank that was joined missed the others' rebuilds
        # (each rank counts the same joins once join() ends), so every rank rebuilds now.
        if (
            first_of_world
            or self._rc_layout_key() != self._rc_key  # model.half(), requires_grad changed
            or joinable.STATE.episode != self._rc_joins
        ):
            self.stats["rebuilds"] += 1
            self._rc_build(check_ranks=True, served=True)
        self._rc_started = True

    # ------------------------------------------------------------------ backward
    def _rc_hook(self, p):
        if self._rc_synchronized:  # synchronize() without step(): a new step begins
            self._rc_reset()
        if not self._rc_started:
            self._rc_begin_step()
        if not self._rc_cb_queued:  # once per backward pass: know when it ends
            torch.autograd.Variable._execution_engine.queue_callback(self._rc_end_of_backward)
            self._rc_cb_queued = True
        g = p.grad
        if g is not None and g.is_sparse:
            self._rc_sparse.setdefault(id(p), g.sparse_dim())
        gathered = self._rc_gathered(p)
        where = self._rc_layout.where.get(id(p))
        if where is None and not gathered:
            return  # not reduced (requires_grad was off at build time)
        count = self._rc_counts.get(id(p), 0) + 1
        if count > self._rc_passes:
            raise RdmacollError(
                f"DistributedOptimizer: the gradient of {self._rc_names[id(p)]!r} arrived "
                f"{count} times before step(), but backward_passes_per_step={self._rc_passes}. "
                "Either more backward passes ran than backward_passes_per_step (raise it), or "
                "its gradient hook fired twice in one pass (reentrant activation checkpointing: "
                "use torch.utils.checkpoint with use_reentrant=False)"
            )
        if where is not None and where[0].index < self._rc_next:
            raise RdmacollError(
                f"DistributedOptimizer: the gradient of {self._rc_names[id(p)]!r} arrived after "
                "its bucket was already being reduced (after the last of backward_passes_per_step "
                "backward passes ended); with reentrant activation checkpointing use "
                "torch.utils.checkpoint(..., use_reentrant=False)"
            )
        self._rc_counts[id(p)] = count
        if where is None:
            return  # sent by _rc_launch_sparse once backward ends
        bucket, j = where
        view = bucket.views[j]
        if gathered:
            view.zero_()  # (the step its gradient first came sparse: the bucket still has its slot)
        elif g is not view:
            copy_into(view, g.to_dense() if g.is_sparse else g)
            p.grad = view
            self.stats["copies"] += 1
        if count == self._rc_passes:
            bucket.ready += 1
            if bucket.ready == len(bucket.params) and bucket.index == self._rc_next:
                self._rc_launch_ready(in_backward=True)

    def _rc_launch_ready(self, in_backward):
        buckets = self._rc_layout.buckets
        while self._rc_next < len(buckets) and buckets[self._rc_next].ready == len(buckets[self._rc_next].params):
            self._rc_launch(buckets[self._rc_next])
            self.stats["launched_in_backward" if in_backward else "launched_in_step"] += 1
            self._rc_next += 1

    def _rc_end_of_backward(self):
        """Autograd calls this when a backward pass ends; after the last pass of a step,
        gradients that did not arrive (unused parameters) will not: launch everything."""
        self._rc_cb_queued = False
        self._rc_pass += 1
        if self._rc_pass == self._rc_passes:
            self._rc_launch_all(in_backward=True)

    def _rc_launch_all(self, in_backward):
        """Launch every bucket not launched yet, in order; gradients that did not arrive
        this step count as zero (as in Horovod), gradients set by hand are copied in."""
        for bucket in self._rc_layout.buckets[self._rc_next :]:
            for p, view in zip(bucket.params, bucket.views):
                if self._rc_counts.get(id(p), 0) == 0:
                    g = p.grad
                    if self._rc_gathered(p):
                        view.zero_()  # its gradient goes by _rc_launch_sparse
                    elif g is None:
                        view.zero_()
                    elif g is not view:
                        view.copy_(g.to_dense() if g.is_sparse else g)
                    p.grad = view
            bucket.ready = len(bucket.params)
        self._rc_launch_ready(in_backward)
        self._rc_launch_sparse()

    def _rc_launch_sparse(self):
        """Start the sparse reductions of the gathered parameters (once a step, after the
        buckets, in parameter order: the same on every rank). A parameter without a
        gradient sends an empty one; a dense gradient set by hand is made sparse."""
        if self._rc_sparse_handles is not None:
            return
        self._rc_sparse_handles = []
        for p in self._rc_params:
            if not (p.requires_grad and self._rc_gathered(p)):
                continue
            dims = self._rc_sparse[id(p)]
            g = p.grad
            if g is None:
                g = torch.sparse_coo_tensor(
                    torch.empty((dims, 0), dtype=torch.int64),
                    torch.empty((0,) + tuple(p.shape[dims:]), dtype=p.dtype),
                    p.shape,
                    check_invariants=False,
                )
            elif not g.is_sparse:
                g = g.to_sparse(dims)
            h = served_sparse_allreduce_async(g, self._rc_names[id(p)], self._rc_op, self._rc_set)
            self._rc_sparse_handles.append((p, h))

    def _rc_finish_sparse(self):
        """The sparse reductions' results become the gradients; with sparse_as_dense, the
        reduced gradients of parameters known sparse are made sparse again (as Horovod)."""
        for p, h in self._rc_sparse_handles or ():
            try:
                p.grad = h.wait()
            except RdmacollError as e:
                raise RdmacollError(
                    f"DistributedOptimizer: reducing the sparse gradient of {self._rc_names[id(p)]!r} failed: {e}"
                ) from e
        if self._rc_sparse_as_dense:
            for p in self._rc_params:
                if id(p) in self._rc_sparse and id(p) in self._rc_layout.where:
                    p.grad = p.grad.to_sparse()

    def _rc_launch(self, bucket):
        t = bucket.flat
        op, post = self._rc_op, 1.0
        if self._rc_predivide != 1.0:
            t.mul_(1.0 / self._rc_predivide)
            op, post = rc.Sum, self._rc_predivide / self._rc_size
        name = f"grad.bucket.{bucket.index}"
        if self._rc_compression is Compression.none:
            a = to_core(t)
            h = rc.allreduce_async(a, op=op, name=name, out=a, process_set=self._rc_set)
            bucket.handle = (h, None, None, post)
        else:  # the packing path: the compressed copy is reduced, then unpacked
            c, ctx = self._rc_compression.compress(t)
            c = contiguous(c)
            a = to_core(c)
            h = rc.allreduce_async(a, op=op, name=name, out=a, process_set=self._rc_set)
            bucket.handle = (h, c, ctx, post)

    def _rc_finish(self, bucket):
        h, c, ctx, post = bucket.handle
        bucket.handle = None
        try:
            h.wait()
        except RdmacollError as e:
            hint = " (another rank called step() without running backward() first)" if NO_BACKWARD in str(e) else ""
            raise RdmacollError(
                f"DistributedOptimizer: reducing gradient bucket {bucket.index} failed{hint}: {e}"
            ) from e
        if c is not None:
            bucket.flat.copy_(self._rc_compression.decompress(c, ctx))
        if post != 1.0:
            bucket.flat.mul_(post)

    # ------------------------------------------------------------------ step
    def _rc_no_backward(self):
        """Tell the other ranks (their bucket reduction meets a differently named one and
        fails naming it), then raise here."""
        first = self._rc_layout.buckets[0].flat if self._rc_layout.buckets else torch.zeros(1)
        with contextlib.suppress(RdmacollError):
            a = to_core(first.reshape(-1))
            rc.allreduce(a, op=self._rc_op, name=NO_BACKWARD, out=a, process_set=self._rc_set)
        raise RdmacollError(
            "DistributedOptimizer: step() (or synchronize()) was called on this "
            "rank without a backward pass since the last step; every rank must "
            "run loss.backward() before step() (gradients set by hand, without "
            "backward, are not supported)"
        )

    def synchronize(self):
        """Wait until every gradient is reduced (for clipping or unscaling before step();
        then call step() inside `with optimizer.skip_synchronize():`). A failure raises
        HorovodInternalError, as Horovod's."""
        try:
            self._rc_synchronize()
        except RdmacollError as e:
            reraise(e)

    def _rc_synchronize(self):
        if self._rc_synchronized or self._rc_excluded:
            return
        if not self._rc_started and self._rc_layout_key() != self._rc_key:
            self._rc_begin_step()  # no hooked gradient ran: parameters unfrozen since
        if not self._rc_layout.buckets and not any(p.requires_grad and self._rc_gathered(p) for p in self._rc_params):
            self._rc_synchronized = True
            return
        if not self._rc_started:
            self._rc_no_backward()
        self._rc_launch_all(in_backward=False)
        t0 = time.perf_counter()
        for bucket in self._rc_layout.buckets:
            self._rc_finish(bucket)
        self._rc_finish_sparse()
        self.stats["wait_s"] += time.perf_counter() - t0
        self._rc_reset()
        self._rc_synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """step() inside this block does not synchronize (call synchronize() before)."""
        self._rc_skip = True
        try:
            yield
        finally:
            self._rc_skip = False

    def step(self, closure=None):
        if not getattr(self, "_rc_skip", False):
            if self._rc_synchronized:
                warnings.warn(_STEP_AFTER_SYNCHRONIZE, stacklevel=2)
            self.synchronize()
        self.stats["steps"] += 1
        self._rc_synchronized = False
        return super().step(closure)

    def zero_grad(self, set_to_none: bool = True):
        """set_to_none=False zeroes whole buckets (one memset each); True drops the views
        as PyTorch does (the next backward's gradients are then copied into the buckets)."""
        if set_to_none:
            return super().zero_grad(set_to_none=True)
        for bucket in self._rc_layout.buckets:
            bucket.buffer.zero_()
            for p, view in zip(bucket.params, bucket.views):
                p.grad = view
        for p in self._rc_params:
            if id(p) not in self._rc_layout.where and p.grad is not None:
                p.grad.zero_()

    # ------------------------------------------------------------------ introspection
    def bucket_sizes(self):
        """Bytes of every bucket, in launch order."""
        return self._rc_layout.sizes()

    def bucket_params(self):
        """Names of the parameters in every bucket, in launch order."""
        return [[self._rc_names[id(p)] for p in b.params] for b in self._rc_layout.buckets]


def DistributedOptimizer(
    optimizer,
    named_parameters=None,
    compression=Compression.none,
    backward_passes_per_step=1,
    op=rc.Average,
    gradient_predivide_factor=1.0,
    num_groups=0,
    groups=None,
    sparse_as_dense=False,
    process_set=global_process_set,
):
    """Wrap a torch.optim optimizer so that step() applies gradients averaged over ranks.

    Horovod's signature; num_groups/groups are accepted and have no effect (buckets
    replace groups). Sparse gradients are allgathered, or with sparse_as_dense=True reduced
    in their bucket (module docstring). The result is an instance of a subclass of
    optimizer's class sharing its state. process_set: gradients are reduced over its ranks
    only (on the others step() applies the local gradients, as in Horovod). op=Adasum (more
    than one rank): Horovod's Adasum optimizer (adasum_optimizer.py).
    """
    if op != rc.Adasum:  # Horovod's checks, in its order, before anything needs init()
        RULES.check_optimizer(op, gradient_predivide_factor, backward_passes_per_step, ops=(rc.Average, rc.Sum))
        if named_parameters is not None:
            named_parameters = list(named_parameters)
            RULES.named_parameters(named_parameters)
    if op == rc.Adasum:
        dist = adasum_optimizer(
            optimizer, named_parameters, compression, backward_passes_per_step, gradient_predivide_factor, process_set
        )
        if dist is not None:
            return dist
        # one rank: Horovod's plain optimizer with op=Sum (the Adasum of one rank is the
        # identity), sparse_as_dense left at its default as Horovod's fallback leaves it
        op, sparse_as_dense = rc.Sum, False
    if process_set is None:
        process_set = global_process_set
    elif process_set is not global_process_set and process_set.included():
        comm_of(process_set, "Allreduce")  # a set that is not registered raises here
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise RdmacollError(f"DistributedOptimizer needs a torch.optim.Optimizer, got {type(optimizer).__name__}")
    if isinstance(optimizer, _DistributedOptimizer):
        raise RdmacollError("this optimizer is already a DistributedOptimizer")
    cls = type(optimizer.__class__.__name__, (_DistributedOptimizer, optimizer.__class__), {})
    dist = cls.__new__(cls)
    dist.__dict__.update(optimizer.__dict__)
    dist._rc_setup(
        named_parameters,
        compression,
        backward_passes_per_step,
        op,
        gradient_predivide_factor,
        process_set,
        sparse_as_dense,
    )
    return dist
