"""The parameters a DistributedOptimizer wraps and their names, with Horovod's checks of
named_parameters: shared by the plain optimizer (optimizer.py) and Adasum's
(adasum_optimizer.py)."""

from __future__ import annotations

from .._horovod import PYTHON_VALUE
from ._rules import RULES


def collect_params(optimizer):
    """Every parameter of every group, once, in group order."""
    seen, params = set(), []
    for group in optimizer.param_groups:
        for p in group["params"]:
            if id(p) not in seen:
                seen.add(id(p))
                params.append(p)
    return params


def name_params(named_parameters, params, groups=None):
    """{id(parameter): name} for params: named_parameters' names (Horovod's checks, in
    Horovod's order, ValueError: _horovod.py), or without them Horovod's names,
    allreduce.noname.<group>.<index> for groups' parameters (allreduce.noname.<i> for a
    plain list)."""
    if named_parameters is None:
        if groups is None:
            return {id(p): f"allreduce.noname.{i}" for i, p in enumerate(params)}
        names = {}
        for i, group in enumerate(groups):
            for j, p in enumerate(group["params"]):
                names.setdefault(id(p), f"allreduce.noname.{i}.{j}")
        return names
    named_parameters = list(named_parameters)
    RULES.named_parameters(named_parameters)
    names = {}
    for n, p in named_parameters:
        names.setdefault(id(p), n)
    missing = [i for i, p in enumerate(params) if id(p) not in names]
    if missing:
        raise RULES.error(
            PYTHON_VALUE,
            "named_parameters was specified, but one or more model parameters "
            f"were not named: {len(missing)} of the optimizer's parameters "
            f"(positions {missing[:5]} in param_groups)",
        )
    return names  # also names of parameters a later add_param_group may bring
