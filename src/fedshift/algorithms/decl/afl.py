"""Stochastic-AFL: settings and declaration, read without importing :mod:`fedshift.algorithms.afl` (no torch)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fedshift.algorithms.declarations import POSITIVE, AlgorithmDeclaration, Count, OptimizerName, Step, Weight

__all__ = ["WGradient", "LambdaGradient", "InitLambda", "AFLSettings", "DECLARATIONS"]

_A = "fedshift.algorithms."

#: δ_w's estimator (Mohri et al. 2019, Fig. 4): b examples of every domain, or b draws of K ~ λ.
WGradient = Literal["perdomain", "weighted"]
#: δ_λ's estimator: b examples of every domain (§4.4), or b draws of K ~ U[p] (Fig. 4 exactly).
LambdaGradient = Literal["perdomain", "uniform"]
#: λ's start: uniform, the empirical mixture of the domain sizes, or a point of the simplex.
InitLambda = Sequence[float] | Literal["uniform", "empirical"]


@dataclass(frozen=True, kw_only=True)
class AFLSettings:
    """Stochastic-AFL (Mohri et al. 2019, Algorithm 1)."""

    batch_size: Count
    client_lr: Step
    lambda_lr: Weight
    optimizer: OptimizerName = "sgd"
    optimizer_kwargs: dict[str, Any] | None = None
    w_gradient: WGradient = "perdomain"
    lambda_gradient: LambdaGradient = "perdomain"
    init_lambda: InitLambda = "uniform"
    w_radius: Annotated[float | None, POSITIVE] = None
    gamma: Weight = 0.0
    mu: Weight = 0.0
    average_iterates: bool = True
    seeds: Sequence[int] | None = None


#: The names this module's algorithms are registered under, and what each declares.
DECLARATIONS: tuple[AlgorithmDeclaration, ...] = (
    AlgorithmDeclaration("afl", _A + "afl", "build_stochastic_afl", AFLSettings, needs=frozenset({"domain_ids"}),
                         loop="own", cell=_A + "afl:matrix_cell", cell_supplies=frozenset({"batch_size", "client_lr"})),
    # no payload: a round is S data-dependent steps of Fig. 3, each a model down and a gradient up to one client
    # per domain, so its traffic is no fixed count of model-sized arrays per sampled client
)
