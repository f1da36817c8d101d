"""Horovod's capability probes and timeline calls, for every adapter (torch, TensorFlow,
Keras): framework-free, so each adapter re-exports the same functions.

The probes answer for rdmacoll, not for what Horovod would be (reasoning in docs/torch.md,
"Capabilities"): rdmacoll links no MPI, Gloo, NCCL, oneCCL, DDL, CUDA or ROCm; MPI
(through mpi4py) only starts the job; CUDA tensors go through the CUDA runtime loaded at
run time, so cuda_built() answers whether that works on this host. The verbose argument of horovod.common.util's
probes is accepted and ignored.
"""

from __future__ import annotations

from rdmacoll import RdmacollError, RdmacollValueError, _core, _session, _settings, is_initialized


def mpi_built(verbose=False) -> bool:
    return False


def gloo_built(verbose=False) -> bool:
    return False


def nccl_built(verbose=False) -> int:
    return 0  # Horovod returns NCCL_VERSION_CODE, or 0 without NCCL


def ccl_built(verbose=False) -> bool:
    return False


def ddl_built(verbose=False) -> bool:
    return False


def cuda_built(verbose=False) -> bool:
    """Whether CUDA tensors can go through rdmacoll here (the question scripts ask Horovod):
    a CUDA runtime loads (RDMACOLL_CUDA_RUNTIME's, where set) and sees a device. Nothing of
    rdmacoll is compiled for CUDA. (It initialises the CUDA driver in this process.)"""
    try:
        settings = _session.current().settings if is_initialized() else _settings.resolve(scope="rank")[0]
        library = str((settings or {}).get("cuda_runtime") or "")
    except RdmacollError:
        library = ""
    return bool(_core.cuda_runtime(library).get("devices"))


def rocm_built(verbose=False) -> bool:
    return False


def mpi_enabled() -> bool:
    return False  # no collective, and no control message, goes through MPI


def gloo_enabled() -> bool:
    return False


def _world_core():
    """The job's core communicator; ValueError before init(), as Horovod's calls raise."""
    if not is_initialized():
        raise RdmacollValueError("rdmacoll has not been initialized; use hvd.init().")
    return _session.current().comm


def mpi_threads_supported() -> bool:
    """Whether MPI (e.g. mpi4py) may be used next to rdmacoll: yes, from any thread, since
    rdmacoll makes no MPI call after init(). Raises ValueError before init(), as Horovod."""
    _world_core()
    return True


def start_timeline(file_path, mark_cycles=False):
    """Horovod's: from now on, write this rank's Chrome trace of every operation to
    file_path, with ".rank<r>" before its extension (every rank writes its own file:
    docs/torch.md). Another call closes the previous file first. mark_cycles is accepted:
    rdmacoll has no negotiation cycles to mark. No HOROVOD_TIMELINE=DYNAMIC is needed."""
    _world_core().restart_timeline(str(file_path))


def stop_timeline():
    """Close this rank's timeline file (complete JSON); nothing when none is open."""
    _world_core().restart_timeline("")


__all__ = [
    "mpi_built",
    "gloo_built",
    "nccl_built",
    "ccl_built",
    "ddl_built",
    "cuda_built",
    "rocm_built",
    "mpi_enabled",
    "gloo_enabled",
    "mpi_threads_supported",
    "start_timeline",
    "stop_timeline",
]
