"""hvd.elastic for torch (horovod/torch/elastic/, 0.28.1): run, TorchState, ElasticSampler,
and the State classes and exceptions, by Horovod's names. The rules are
frameworks/_elastic.py's (both adapters'); this module holds what is torch's: the state of
modules, optimizers and samplers, saved, restored and broadcast from rank 0.

    import rdmacoll.frameworks.torch as hvd
    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ...
            state.commit()
    train(hvd.elastic.TorchState(model, optimizer, epoch=0))

under `rdmacoll-run --elastic` (rdmacoll/elastic_run.py); docs/elastic.md.
"""

from __future__ import annotations

import copy
import math
import random

import torch

import rdmacoll as rc

from .._elastic import ObjectState, State, run_fn
from .._horovod import HorovodInternalError, HostsUpdatedInterrupt
from .functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters


def run(func):
    """Horovod's hvd.elastic.run: func(state, ...) goes on through workers lost and added
    (frameworks/_elastic.py, run_fn). Its first argument is the State; func itself must not
    be a collective."""
    return run_fn(func)


class ElasticSampler(torch.utils.data.Sampler):
    """Horovod's ElasticSampler: this rank's share of the dataset's samples not yet
    processed this epoch, shuffled the same on every rank (seed + epoch), re-partitioned
    after every reset. record_batch(batch_idx, batch_size) after each batch, set_epoch(e)
    at the end of each epoch; kept in the TorchState."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices: list[int] = []
        self.num_samples = 0
        self.total_size = 0
        self.reset()

    def set_epoch(self, epoch):
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        self.processed_num += batch_size * self.num_replicas

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def state_dict(self):
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def reset(self):
        self.num_replicas = rc.size()
        self.rank = rc.rank()
        indices = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(indices)
        self.remaining_indices = indices[self.processed_num :]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        indices = self.remaining_indices[:]
        indices += indices[: self.total_size - len(indices)]
        return iter(indices[self.rank : self.total_size : self.num_replicas])

    def __len__(self):
        return self.num_samples


class StateHandler:
    """What TorchState does with an attribute of a type it knows (Horovod's handlers): its
    state_dict() saved (a deep copy), loaded back by restore(), rank 0's after sync()."""

    def __init__(self, value):
        self.value = value
        self.save()

    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self):
        self.value.load_state_dict(broadcast_object(self.value.state_dict()))

    def set_value(self, value):
        self.value = value
        self.save()


class ModelStateHandler(StateHandler):
    def sync(self):
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class OptimizerStateHandler(StateHandler):
    def sync(self):
        broadcast_optimizer_state(self.value, root_rank=0)


class SamplerStateHandler(StateHandler):
    """An ElasticSampler's epoch and progress (its state_dict), rank 0's after sync()."""


# Horovod's registry: the first type an attribute is an instance of picks its handler
HANDLERS = [
    (torch.nn.Module, ModelStateHandler),
    (torch.optim.Optimizer, OptimizerStateHandler),
    (ElasticSampler, SamplerStateHandler),
]


class TorchState(ObjectState):
    """Horovod's TorchState(model=None, optimizer=None, **kwargs): modules, optimizers and
    ElasticSamplers among the arguments have their state saved, restored and broadcast;
    every other argument is an ObjectState attribute. Assigning a new module (etc.) to an
    attribute saves it."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(model=model, optimizer=optimizer)
        handlers, plain = {}, {}
        for name, value in kwargs.items():
            cls = next((h for t, h in HANDLERS if isinstance(value, t)), None)
            if cls is None:
                plain[name] = value
            else:
                handlers[name] = cls(value)
        self._handlers = handlers
        for name, handler in handlers.items():
            setattr(self, name, handler.value)
        super().__init__(bcast_object=broadcast_object, get_rank=rc.rank, **plain)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self):
        for handler in self._handlers.values():
            handler.sync()
        super().sync()

    def reset(self):
        """After a reset, before the sync: every ElasticSampler re-partitions what its epoch
        has left among the new world's ranks, as Horovod's documentation promises. Horovod
        0.28.1 did so only in the sync, which it skips when hosts were only removed: its
        samplers then kept the old world's size and rank (samples taken twice or never)."""
        for handler in self._handlers.values():
            if isinstance(handler, SamplerStateHandler):
                handler.value.reset()
        super().reset()

    def __setattr__(self, name, value):
        if hasattr(self, name) and name in self.__dict__.get("_handlers", {}):
            self._handlers[name].set_value(value)
        super().__setattr__(name, value)


__all__ = [
    "run",
    "State",
    "ObjectState",
    "TorchState",
    "ElasticSampler",
    "HorovodInternalError",
    "HostsUpdatedInterrupt",
]
