"""The interface every federated algorithm in fedshift implements.

Shape taken from FedJAX (``fedjax.core.federated_algorithm.FederatedAlgorithm``): an algorithm is
a small immutable object built by a factory from its hyper-parameters, with

* ``init(params) -> state``: the server state before round 0;
* ``apply(state, clients, key) -> (state, diagnostics)``: one communication round (one step for
  Stochastic-AFL) over the sampled clients, randomness derived from ``key`` = (seed, round);
* ``eval_params(state) -> params``: the model the algorithm outputs (e.g. the averaged iterate
  w^A of Stochastic-AFL).

States are dataclasses of tensors and plain numbers, so the training loop can checkpoint any
algorithm's state with :func:`state_to_dict` / :func:`state_from_dict` and later execution layers
can stack per-client state (control variates, dual variables) along a client axis.
Diagnostics are tensors left on the device; the training loop synchronises them only when it logs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import torch

from fedshift.core.rng import RoundKey

Params = dict[str, torch.Tensor]
State = TypeVar("State")

__all__ = ["ClientData", "FederatedAlgorithm", "state_to_dict", "state_from_dict", "Params"]


@dataclass(frozen=True)
class ClientData:
    """One client's local training data, gathered once into contiguous tensors.

    Attributes
    ----------
    client_id : int
        Stable id; also the client's RNG stream (``key.numpy(client_id)``).
    x : Tensor, shape (n, ...)
        Inputs on the run's device.
    y : Tensor, shape (n,)
        Integer class labels (int64).
    domain : int
        Index of the client's domain in the experiment's domain list.
    """

    client_id: int
    x: torch.Tensor
    y: torch.Tensor
    domain: int

    def __post_init__(self) -> None:
        if self.x.shape[0] != self.y.shape[0]:
            raise ValueError(f"client {self.client_id}: {self.x.shape[0]} inputs but {self.y.shape[0]} labels")
        if self.x.shape[0] == 0:
            raise ValueError(f"client {self.client_id} holds no examples")

    @property
    def num_examples(self) -> int:
        """Number of local examples n_i."""
        return int(self.y.shape[0])


@dataclass(frozen=True)
class FederatedAlgorithm(Generic[State]):
    """A federated algorithm: ``init``, ``apply`` and ``eval_params`` (see module docstring).

    Attributes
    ----------
    name : str
        Registry name.
    init : callable
        ``init(params: dict[str, Tensor]) -> State``.
    apply : callable
        ``apply(state, clients: Sequence[ClientData], key: RoundKey) -> (State, dict[str, Tensor])``.
    eval_params : callable
        ``eval_params(state) -> dict[str, Tensor]``, the parameters to evaluate.
    state_type : type
        The dataclass of the state (used to restore checkpoints).
    """

    name: str
    init: Callable[[Params], State]
    apply: Callable[[State, Sequence[ClientData], RoundKey], tuple[State, dict[str, torch.Tensor]]]
    eval_params: Callable[[State], Params]
    state_type: type


def state_to_dict(state: Any) -> dict[str, Any]:
    """Shallow dict of a state dataclass (tensors, dicts of tensors, numbers) for ``torch.save``.

    Raises
    ------
    TypeError
        If ``state`` is not a dataclass instance.
    """
    if not dataclasses.is_dataclass(state):
        raise TypeError(f"state must be a dataclass, got {type(state).__name__}")
    return {f.name: getattr(state, f.name) for f in dataclasses.fields(state)}


def state_from_dict(state_type: type, d: dict[str, Any]) -> Any:
    """Inverse of :func:`state_to_dict`.

    Raises
    ------
    ValueError
        If the stored fields do not match the dataclass (a checkpoint of another algorithm).
    """
    names = {f.name for f in dataclasses.fields(state_type)}
    if set(d) != names:
        raise ValueError(f"checkpoint fields {sorted(d)} do not match {state_type.__name__} fields {sorted(names)}")
    return state_type(**d)
