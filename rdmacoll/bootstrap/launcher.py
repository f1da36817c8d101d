"""Which launcher started this process, and how many processes it says the job has.

Read from the environment only (nothing is imported): bootstrap chooses MPI or torch's
store from it (the bootstrap setting, RDMACOLL_BOOTSTRAP=auto|mpi|torch), and refuses a
world that is smaller than the launcher says: a job launched as N processes that each see
a world of one would train N times alone, silently.
"""

from __future__ import annotations

from .. import _core

# Variables that say an MPI launcher (mpiexec, mpirun, srun with PMI/PMIx) started us.
MPI_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "PMIX_RANK")
TORCH_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def detect(env) -> str | None:
    """'elastic', 'torch', 'mpi', or None (no launcher: a process alone)."""
    if env.get("RDMACOLL_ELASTIC_STORE"):
        return "elastic"  # rdmacoll-run --elastic (bootstrap/elastic.py)
    if env.get("TORCHELASTIC_RUN_ID"):
        return "torch"  # torchrun (its workers' environment always has this)
    if any(env.get(v) for v in MPI_VARS):
        return "mpi"
    if all(env.get(v) for v in TORCH_VARS):
        return "torch"  # the variables torch's env:// rendezvous reads, set by hand or by a script
    if env.get("SLURM_PROCID") is not None and env.get("SLURM_STEP_ID") is not None:
        return "mpi"  # srun: the MPI library finds the job through Slurm's PMI
    return None


def sizes(env) -> dict[str, int]:
    """What the launchers' variables say the job's size is: {variable: size}."""
    out = {}
    for var in ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"):
        if env.get(var, "").strip().isdigit():
            out[var] = int(env[var])
    # srun sets the step's task count; a batch script running python directly inside an
    # allocation of N tasks has only SLURM_NTASKS (and one process: the case to refuse).
    for var in ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"):
        if env.get(var, "").strip().isdigit():
            out[var] = int(env[var])
            break
    return out


def check_size(size: int, bootstrap: str, env) -> None:
    """Raise (on every process: each decides alone, from its own environment) when a
    launcher says the job has more processes than the bootstrap found."""
    said = {var: n for var, n in sizes(env).items() if n > 1 and n != size}
    if not said:
        return
    seen = ", ".join(f"{var}={n}" for var, n in said.items())
    if bootstrap == "mpi":
        fix = (
            "if torchrun started the job, set RDMACOLL_BOOTSTRAP=torch (or use init_process_group"
            '("rdmacoll")); under srun, use an MPI built with Slurm\'s PMI (srun --mpi=pmix or pmi2) or '
            "launch with mpiexec"
        )
    else:
        fix = "if mpiexec or srun started the job, set RDMACOLL_BOOTSTRAP=mpi"
    raise _core.RdmacollError(
        f"rdmacoll.init(): the launcher says the job has more processes ({seen}) than the {bootstrap} "
        f"bootstrap found ({size}): every process would run alone. {fix[0].upper()}{fix[1:]}."
    )
