"""Horovod 0.28.1's rules for the adapters' arguments, written once; nothing here imports a
framework. Each adapter converts its tensors to plain values (ints, lists, dtype names),
calls these rules through a `Rules` object built with its own map from error kind to
exception type, and so raises what its framework's Horovod raises.

Kinds, and what Horovod raises for them (horovod/torch/mpi_ops.py, adapter_v2.cc
ThrowIfError; horovod/tensorflow/mpi_ops.cc ConvertStatus; horovod/common/operations.cc):

    kind              Horovod                                    torch adapter          TensorFlow adapter
    PYTHON_VALUE      ValueError raised in its Python code       RdmacollValueError     RdmacollValueError
                      (op with average, predivide without
                      Average, backward_passes_per_step < 1)
    BAD_ARGUMENT      INVALID_ARGUMENT from its enqueue (splits,  RdmacollValueError     InvalidArgumentError
                      root rank, a name in flight): torch gets
                      std::invalid_argument as ValueError
    NOT_IMPLEMENTED   NotImplementedError (Adasum's limits,      NotImplementedError    NotImplementedError
                      tf.IndexedSlices with other ops)
    RANKS_DISAGREE    PRECONDITION_ERROR: ranks called           HorovodInternalError   FailedPreconditionError
                      different collectives, not initialised
    INTERNAL          a collective failed (a peer died, shut     HorovodInternalError   UnknownError
                      down): torch HorovodInternalError

RdmacollValueError is both a ValueError and an RdmacollError; HorovodInternalError (below)
is an RdmacollError too, so `except RdmacollError` catches every one of them.
"""

from __future__ import annotations

import warnings

from rdmacoll import Adasum, Average, Max, Min, Product, RdmacollError, Sum

PYTHON_VALUE = "python value"
BAD_ARGUMENT = "bad argument"
NOT_IMPLEMENTED = "not implemented"
RANKS_DISAGREE = "ranks disagree"
INTERNAL = "internal"
KINDS = (PYTHON_VALUE, BAD_ARGUMENT, NOT_IMPLEMENTED, RANKS_DISAGREE, INTERNAL)

OPS = (Average, Sum, Min, Max, Product, Adasum)


class HorovodInternalError(RdmacollError):
    """Horovod's horovod.common.exceptions.HorovodInternalError (a RuntimeError): a collective
    failed. The torch adapter raises it where Horovod's torch ops do (a failure while
    communicating, ranks that disagree); an RdmacollError, so `except RdmacollError` keeps
    catching it."""


class HostsUpdatedInterrupt(RuntimeError):
    """Horovod's horovod.common.exceptions.HostsUpdatedInterrupt: the set of hosts changed
    (elastic training: a reset without restoring the committed state when skip_sync)."""

    def __init__(self, skip_sync):
        super().__init__()
        self.skip_sync = skip_sync


# Which dtypes each collective takes. HOROVOD_DTYPES: Horovod 0.28.1's CPU build of its
# torch ops (mpi_ops_v2.cc: the kernels it registers; any other dtype raises ValueError
# "Tensor type torch.X is not supported."). ACCEPTED: the adapters' (a superset: uint8,
# int8, int16 and bfloat16 reductions, bool where nothing is reduced, and uint16 there,
# which Horovod's TensorFlow ops move: tensorflow/mpi_ops.cc registers allgather, broadcast
# and alltoall for {uint8, int8, uint16, int16, int32, int64, float16, float32, float64,
# bool}).
_INTS = ("int32", "int64")
_FLOATS = ("float16", "float32", "float64")
_REDUCE = ("allreduce", "grouped_allreduce", "reducescatter", "grouped_reducescatter")
_MOVE = ("allgather", "grouped_allgather", "broadcast", "alltoall")
HOROVOD_DTYPES = {
    **{c: frozenset(_INTS + _FLOATS) for c in _REDUCE},
    **{c: frozenset(("uint8", "int8", "int16") + _INTS + _FLOATS) for c in _MOVE},
}
ACCEPTED_DTYPES = {
    **{c: frozenset(("uint8", "int8", "int16", "bfloat16") + _INTS + _FLOATS) for c in _REDUCE},
    **{c: frozenset(("uint8", "int8", "int16", "uint16", "bfloat16", "bool") + _INTS + _FLOATS) for c in _MOVE},
}
ADASUM_DTYPES = frozenset(_FLOATS)  # Horovod: ValueError for bfloat16, an internal error for integers

# Beginnings of the core's messages for a mismatch between ranks (comm/communicator.cc,
# comm/primitives.cc) and for a communicator used outside init() .. shutdown(); and the
# words of join's refusals (_join.py: Horovod's controller refuses these in negotiation,
# an ErrorOp, so PRECONDITION_ERROR as a mismatch).
_PRECONDITION = ("collective mismatch", "protocol mismatch", "rdmacoll is not initialised", "rdmacoll is shut down")
_JOIN_REFUSAL = " is not supported with Join at this time."


def core_error_kind(error: BaseException) -> str:
    """The kind of an error the core (or the plain API) raised from a collective: an argument
    error (ValueError) is BAD_ARGUMENT, a mismatch between ranks, join's refusals or a
    communicator used outside init() .. shutdown() RANKS_DISAGREE, anything else INTERNAL."""
    text = str(error)
    if text.startswith(_PRECONDITION) or _JOIN_REFUSAL in text:  # (not initialised: a ValueError too)
        return RANKS_DISAGREE
    return BAD_ARGUMENT if isinstance(error, ValueError) else INTERNAL


class Rules:
    """Horovod's rules, raising through `errors`: {kind: exception type (called with the
    message)}, one entry per kind (the adapter's mapping, see the module docstring)."""

    def __init__(self, errors):
        missing = set(KINDS) - set(errors)
        if missing:
            raise ValueError(f"Rules: no exception type for {sorted(missing)}")
        self.errors = dict(errors)

    def error(self, kind, message):
        """The exception to raise for a rule of `kind`."""
        return self.errors[kind](message)

    # ------------------------------------------------------------------ reduction ops
    def resolve_op(self, average=None, op=None, stacklevel=3):
        """Horovod's handle_average_backwards_compatibility (both frameworks): op wins,
        op together with average is ValueError, average=True/False is Average/Sum with a
        DeprecationWarning, nothing is Average; an op Horovod does not have is BAD_ARGUMENT."""
        if op is not None:
            if average is not None:
                raise self.error(PYTHON_VALUE, "The op parameter supersedes average. Please provide only one of them.")
        elif average is not None:
            warnings.warn(
                "Parameter `average` has been replaced with `op` and will be removed in v1.0",
                DeprecationWarning,
                stacklevel=stacklevel,
            )
            op = Average if average else Sum
        else:
            op = Average
        return self.check_op(op)

    def check_op(self, op):
        if op not in OPS:
            raise self.error(
                BAD_ARGUMENT, f"unsupported reduction op {op!r}; use Average, Sum, Min, Max, Product or Adasum"
            )
        return op

    def check_adasum(self, global_set: bool, size: int, sparse: bool = False):
        """Horovod's refusals of op=Adasum on CPU tensors, in its order (horovod/torch/mpi_ops.py,
        horovod/tensorflow/__init__.py): sparse tensors (TensorFlow), a process set other than
        the global one, a number of ranks that is not a power of two."""
        if sparse:
            raise self.error(
                NOT_IMPLEMENTED,
                "The Adasum reduction does not currently support sparse tensors. As a "
                "workaround please pass sparse_as_dense=True to DistributedOptimizer",
            )
        if not global_set:
            raise self.error(NOT_IMPLEMENTED, "Adasum does not support non-global process sets yet.")
        if size & (size - 1):
            raise self.error(NOT_IMPLEMENTED, "Running Adasum with non-power of 2 ranks is not supported yet.")

    def check_sparse_allreduce(self, op, prescale_factor, postscale_factor):
        """tf.IndexedSlices allreduce (allgathered): Sum and Average only, no scale factors."""
        if op not in (Average, Sum):
            raise self.error(NOT_IMPLEMENTED, "Only Sum and Average ops are supported with tf.IndexedSlices")
        if prescale_factor != 1.0 or postscale_factor != 1.0:
            raise self.error(NOT_IMPLEMENTED, "Pre/postscale_factor are not supported with tf.IndexedSlices")

    @staticmethod
    def fold_average(op, postscale_factor, size):
        """Horovod's core: Average with a postscale factor is Sum, then one multiply by
        postscale_factor / size (not a division then a multiply)."""
        if op == Average and postscale_factor != 1.0:
            return Sum, postscale_factor / size
        return op, postscale_factor

    # ------------------------------------------------------------------ optimizers
    def check_optimizer(self, op, gradient_predivide_factor, backward_passes_per_step, ops=OPS):
        """DistributedOptimizer's (both frameworks), in Horovod's order: the predivide rule,
        then backward_passes_per_step; ops: the ops this optimizer reduces with."""
        if gradient_predivide_factor != 1.0 and op != Average:
            raise self.error(PYTHON_VALUE, "gradient_predivide_factor not supported with op != Average")
        if backward_passes_per_step <= 0:
            raise self.error(PYTHON_VALUE, "backward_passes_per_step must be > 0")
        if op not in ops:
            raise self.error(PYTHON_VALUE, "op currently only supports Average and Sum")

    def named_parameters(self, named_parameters):
        """Horovod's checks of DistributedOptimizer's named_parameters (a list of (name,
        parameter)), before anything needs init(): tuples, names unique."""
        if not all(isinstance(item, tuple) and len(item) == 2 for item in named_parameters):
            raise self.error(
                PYTHON_VALUE,
                "named_parameters should be a sequence of tuples (name, parameter), "
                "usually produced by model.named_parameters().",
            )
        seen, dups = set(), []
        for n, _ in named_parameters:
            if n in seen and n not in dups:
                dups.append(n)
            seen.add(n)
        if dups:
            raise self.error(
                PYTHON_VALUE,
                f"Parameter names in named_parameters must be unique. Found duplicates: {', '.join(map(str, dups))}",
            )

    # ------------------------------------------------------------------ collectives
    def check_dtype(self, collective, dtype_name, what="tensor"):
        """dtype_name ('float32', 'bool'...) must be one the adapters take for collective."""
        accepted = ACCEPTED_DTYPES[collective]
        if dtype_name not in accepted:
            if dtype_name == "bool" and collective in _REDUCE:
                raise self.error(
                    BAD_ARGUMENT,
                    f"{what} has dtype bool, which cannot be reduced ({collective}); "
                    "bool tensors travel by allgather, broadcast, alltoall",
                )
            raise self.error(BAD_ARGUMENT, f"{what} has dtype {dtype_name}; {collective} takes {sorted(accepted)}")

    def check_rows(self, ndim, collective):
        """Collectives that split or concatenate along the first dimension refuse scalars."""
        if ndim == 0:
            raise self.error(BAD_ARGUMENT, f"{collective} does not support scalar inputs")

    def set_size(self, size):
        """A process set's size (ProcessSet.size()), which is None when it is not registered."""
        if size is None:
            raise self.error(BAD_ARGUMENT, "Process set does not exist or has not been registered.")
        return size

    def check_root(self, root_rank, ranks):
        """broadcast's root_rank (a global rank) must be one of the set's `ranks`."""
        if root_rank not in ranks:
            raise self.error(BAD_ARGUMENT, f"broadcast received invalid root rank {root_rank} for provided process set")

    def alltoall_splits(self, rows, splits, size, ndim=1, dtype_name="int32"):
        """Horovod's EnqueueTensorAlltoall checks of alltoall's splits, before communicating:
        `splits` (a list of ints, or None) has size entries (none: rows must divide evenly),
        1-D int32 (ndim, dtype_name: what the caller's splits tensor was), none negative
        (rdmacoll's addition), summing to at most rows; rows past the sum are not sent.
        Returns the list to send with (None: even split)."""
        if splits is not None:
            if ndim > 1:
                raise self.error(BAD_ARGUMENT, "alltoall expects a 1D splits tensor")
            if dtype_name != "int32":
                raise self.error(BAD_ARGUMENT, "alltoall expects splits to contain 32-bit integer elements.")
            if len(splits) == 0:
                splits = None
        if splits is None:
            if size and rows % size:
                raise self.error(
                    BAD_ARGUMENT,
                    "splits not provided, but first dimension of tensor is not an even multiple of the number of "
                    "workers.",
                )
            return None
        if len(splits) != size:
            raise self.error(BAD_ARGUMENT, "Number of entries in splits does not equal number of workers.")
        splits = [int(s) for s in splits]
        if any(s < 0 for s in splits):
            raise self.error(BAD_ARGUMENT, f"alltoall: splits must not be negative, got {splits}")
        if sum(splits) > rows:
            raise self.error(BAD_ARGUMENT, "Sum of splits entries is greater than the first dimension of tensor.")
        return splits
