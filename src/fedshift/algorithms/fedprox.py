"""FedProx: FedAvg with a proximal term on every client's local objective.

Paper: T. Li, A. K. Sahu, M. Zaheer, M. Sanjabi, A. Talwalkar, V. Smith. *Federated Optimization
in Heterogeneous Networks.* MLSys 2020, arXiv:1812.06127, Algorithm 2: client k approximately
minimises h_k(w; w^t) = F_k(w) + μ/2 ‖w − w^t‖² (eq. 2), here by E epochs of mini-batch SGD, and
the server averages as FedAvg. ``squared=False`` gives the unsquared per-tensor norm of the Bai
et al. (2024) benchmark used for PACS/iWildCam (papers spec §5.6).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from fedshift.algorithms.decl.fedprox import DECLARATIONS
from fedshift.algorithms.fedavg import FedAvgState, build_fedavg
from fedshift.algorithms.registry import register
from fedshift.core.base import FederatedAlgorithm

__all__ = ["build_fedprox"]


@register(DECLARATIONS[0])
def build_fedprox(module: nn.Module, *, mu: float, squared: bool = True, **fedavg_kwargs: Any
                  ) -> FederatedAlgorithm[FedAvgState]:
    """Build FedProx.

    Parameters
    ----------
    module : nn.Module
        The model.
    mu : float
        μ >= 0 of the proximal term; μ = 0 is FedAvg exactly.
    squared : bool
        Squared norm (Li et al. 2020, default) or the benchmark's unsquared variant.
    **fedavg_kwargs
        ``clients_per_round``, ``local_epochs``, ``batch_size``, ``client_lr``, server optimiser,
        ``path`` and ``client_weights`` as :func:`fedshift.algorithms.fedavg.build_fedavg`.

    Returns
    -------
    FederatedAlgorithm[FedAvgState]

    Raises
    ------
    ValueError
        If ``mu < 0``.
    """
    return build_fedavg(module, prox_mu=mu, prox_squared=squared, name=fedavg_kwargs.pop("name", "fedprox"),
                        **fedavg_kwargs)
