"""The torch adapter's errors: Horovod's rules (../_horovod.py) raising what Horovod's torch
ops raise for each kind, and failures of collectives as HorovodInternalError."""

from __future__ import annotations

import contextlib
import functools

from rdmacoll import RdmacollError, RdmacollValueError

from .._horovod import (
    BAD_ARGUMENT,
    INTERNAL,
    NOT_IMPLEMENTED,
    PYTHON_VALUE,
    RANKS_DISAGREE,
    HorovodInternalError,
    Rules,
    core_error_kind,
)

RULES = Rules(
    {
        PYTHON_VALUE: RdmacollValueError,
        BAD_ARGUMENT: RdmacollValueError,  # Horovod: std::invalid_argument, a ValueError in Python
        NOT_IMPLEMENTED: NotImplementedError,
        RANKS_DISAGREE: HorovodInternalError,  # Horovod: std::logic_error -> RuntimeError -> HorovodInternalError
        INTERNAL: HorovodInternalError,
    }
)


def as_torch_error(error: BaseException) -> BaseException:
    """The exception Horovod's torch ops raise for `error` from a collective: the core's
    failures (not argument errors) as HorovodInternalError with the same text; anything
    else (argument errors, converted ones, KeyboardInterrupt...) as it is."""
    if not isinstance(error, RdmacollError) or isinstance(error, (ValueError, HorovodInternalError)):
        return error
    return RULES.error(core_error_kind(error), str(error))


def reraise(error: BaseException):
    """Raise as_torch_error(error) (from error, when it is another exception)."""
    mapped = as_torch_error(error)
    try:
        if mapped is error:
            raise error
        raise mapped from error
    finally:
        # this frame, in the raised exception's traceback, must not hold it: a reference
        # cycle would keep the failed step's tensors, and the library memory under them,
        # until the garbage collector's next full pass (an elastic job resets on them)
        del mapped, error


@contextlib.contextmanager
def as_horovod():
    """Inside: a failed collective raises as Horovod's torch ops raise it (reraise)."""
    try:
        yield
    except RdmacollError as e:
        reraise(e)


def raising_as_horovod(fn):
    """fn, its failed collectives raised as Horovod's torch ops raise them."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with as_horovod():
            return fn(*args, **kwargs)

    return wrapper
