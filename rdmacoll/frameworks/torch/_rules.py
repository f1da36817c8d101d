"""The torch adapter's errors: Horovod's rules (../_horovod.py) raising what Horovod's torch
ops raise for each kind, and failures of collectives as HorovodInternalError."""

from __future__ import annotations

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
    if mapped is error:
        raise error
    raise mapped from error
