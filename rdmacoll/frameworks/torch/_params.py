"""The parameters a DistributedOptimizer wraps and their names, with Horovod's checks of
named_parameters: shared by the plain optimizer (optimizer.py) and Adasum's
(adasum_optimizer.py)."""

from __future__ import annotations

from rdmacoll import RdmacollValueError


def collect_params(optimizer):
    """Every parameter of every group, once, in group order."""
    seen, params = set(), []
    for group in optimizer.param_groups:
        for p in group["params"]:
            if id(p) not in seen:
                seen.add(id(p))
                params.append(p)
    return params


def name_params(named_parameters, params):
    """{id(parameter): name} for params: named_parameters' names (Horovod's checks, in
    Horovod's order, ValueError), or allreduce.noname.<i> without them."""
    if named_parameters is None:
        return {id(p): f"allreduce.noname.{i}" for i, p in enumerate(params)}
    # Horovod's checks and errors (ValueError), in Horovod's order
    named_parameters = list(named_parameters)
    if not all(isinstance(item, tuple) and len(item) == 2 for item in named_parameters):
        raise RdmacollValueError(
            "named_parameters should be a sequence of tuples (name, parameter), "
            "usually produced by model.named_parameters()."
        )
    seen, dups = set(), []
    for n, _ in named_parameters:
        if n in seen and n not in dups:
            dups.append(n)
        seen.add(n)
    if dups:
        raise RdmacollValueError(
            f"Parameter names in named_parameters must be unique. Found duplicates: {', '.join(map(str, dups))}"
        )
    names = {}
    for n, p in named_parameters:
        names.setdefault(id(p), n)
    missing = [i for i, p in enumerate(params) if id(p) not in names]
    if missing:
        raise RdmacollValueError(
            "named_parameters was specified, but one or more model parameters "
            f"were not named: {len(missing)} of the optimizer's parameters "
            f"(positions {missing[:5]} in param_groups)"
        )
    return names  # also names of parameters a later add_param_group may bring
