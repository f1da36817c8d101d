"""rdmacoll's messages: the `rdmacoll` logger, RDMACOLL_LOG_LEVEL, and the core's sink.

Every message, the core's (stall warnings, the debug log of algorithm choices) and the
Python package's (init()'s report at info), goes to the logger named "rdmacoll",
prefixed with the rank: "[rank 3] ...".

Level: RDMACOLL_LOG_LEVEL (or Horovod's HOROVOD_LOG_LEVEL) sets the logger's level when
it is set; otherwise the logger's level is what the user's logging configuration makes
it (Python's default: warning). The core is told that level at init() and builds no
message below it.

Where lines go: to the user's handlers when logging is configured (a handler on the
logger or the root logger); otherwise to stderr through a handler of ours, as NCCL_DEBUG
lines appear without any set-up: "rdmacoll INFO [rank 0] ...".
"""

from __future__ import annotations

import logging
import sys

logger = logging.getLogger("rdmacoll")

# The setting's names (the core's canonical ones) and the core's level numbers.
LEVELS = {"error": logging.ERROR, "warning": logging.WARNING, "info": logging.INFO, "debug": logging.DEBUG}
_CORE_LEVELS = (logging.ERROR, logging.WARNING, logging.INFO, logging.DEBUG)


class _StderrUnlessConfigured(logging.StreamHandler):
    """stderr (as it is at each line: pytest and users swap it), silent once the user
    has given the root logger a handler (the line reaches it by propagation)."""

    def __init__(self):
        super().__init__()
        self.setFormatter(logging.Formatter("rdmacoll %(levelname)s %(message)s"))

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value):
        pass

    def emit(self, record):
        if not logging.getLogger().handlers:
            super().emit(record)


def configure(level: str | None) -> str:
    """Applies the log_level setting (None when unset) and returns the level the core
    should use: the logger's effective level, as the setting's name."""
    if level:
        logger.setLevel(LEVELS[level])
    if not any(isinstance(h, _StderrUnlessConfigured) for h in logger.handlers) and not logger.hasHandlers():
        logger.addHandler(_StderrUnlessConfigured())
    effective = logger.getEffectiveLevel()
    for name in ("debug", "info", "warning"):
        if effective <= LEVELS[name]:
            return name
    return "error"


def emit(level: int, line: str) -> None:
    """The core's sink: level 0 error .. 3 debug, the line already prefixed with the rank."""
    logger.log(_CORE_LEVELS[level], line)


def say(level: int, rank: int, message: str, *args) -> None:
    """A message of the Python package, prefixed with the rank like the core's."""
    if logger.isEnabledFor(level):
        logger.log(level, f"[rank {rank}] {message}", *args)
