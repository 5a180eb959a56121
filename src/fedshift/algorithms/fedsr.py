"""FedSR: federated domain generalisation by a simple probabilistic representation, regularised on every client.

Paper: A. T. Nguyen, P. H. S. Torr, S.-N. Lim. *FedSR: A Simple and Effective Domain Generalization Method for
Federated Learning.* NeurIPS 2022, §3. The network maps x to a Gaussian representation p(z|x) = N(μ(x), diag σ²(x))
and classifies a sample z = μ + σ ⊙ ε; each client minimises, on its own data,

    CE(cls(z), y) + α_L2R E‖z‖₂² + α_CMI E KL(p(z|x) ‖ r(z|y)),

with r(z|y) = N(r_μ[y], diag r_σ[y]²) a learnable reference distribution per class (the conditional-mutual-
information bound: KL = Σ_d [log r_σ − log σ + (σ² + (μ − r_μ)²) / (2 r_σ²) − 1/2]), and the server averages every
parameter (r_μ, r_σ included) as FedAvg (n_i weights). No domain labels and no target data are used.

The network is built from the given model (:class:`FedSRNet`): its layers up to its last linear layer are the
feature extractor (``cnn2``'s convolutions; MLR's flattened input), a linear encoder gives (μ, softplus⁻¹ σ) of
``z_dim`` dimensions, and a linear classifier maps z to the logits. At z = μ the encoder and the classifier compose
to one linear layer, so the evaluated model is the given model's own architecture (:func:`to_module_params`):
``eval_params`` returns the deterministic predictor at the mean representation [ours: the authors' code samples z
at test time too; the mean keeps the evaluation deterministic and the matrix's model unchanged].

Choices: the text's squared norm in L2R (the authors' code takes the unsquared ‖z‖₂); r_μ starts at 0 and r_σ at
softplus(1) (their code's ``r_mu`` zeros, ``r_sigma`` ones under a softplus); ε is drawn from the round key's
stream ``key.torch(FEDSR_STREAM, client)``, one (B, z_dim) draw per local step; the encoder and classifier are
initialised with PyTorch's default Linear initialisation under a seed taken from w₀'s head (so w₀, hence the run's
seed, fixes them); the feature extractor starts from w₀.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Sequence
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn

from fedshift.algorithms.decl.fedsr import DECLARATIONS
from fedshift.algorithms.fedavg import FedAvgState
from fedshift.algorithms.local_steps import averaged_round, sampled_pool
from fedshift.algorithms.registry import register
from fedshift.core.base import ClientData, FederatedAlgorithm, Params
from fedshift.core.engine import ClientPool, pool_cache
from fedshift.core.rng import RoundKey

__all__ = ["FedSRNet", "build_fedsr", "to_module_params", "fedsr_objective", "FEDSR_STREAM"]

#: Stream of FedSR's representation noise within a round's key (client id follows).
FEDSR_STREAM = 2**31 - 2


def _head(module: nn.Module) -> tuple[str, nn.Linear]:
    """The name and layer of the model's last ``nn.Linear`` (its classifier head)."""
    linears = [(n, m) for n, m in module.named_modules() if isinstance(m, nn.Linear)]
    if not linears:
        raise ValueError(f"FedSR needs a model whose last layer is nn.Linear; {type(module).__name__} has none")
    return linears[-1]


class FedSRNet(nn.Module):
    """FedSR's network around a model whose forward ends in its last linear layer (module docstring).

    Parameters
    ----------
    module : nn.Module
        The model (copied; its head replaced by the identity to give the features, shape (B, F)).
    z_dim : int
        Dimension of z.

    Attributes
    ----------
    features, enc, cls : nn.Module
        Feature extractor, encoder F → 2·z_dim (μ, softplus⁻¹ σ), classifier z_dim → K.
    r_mu, r_sigma : nn.Parameter, shape (K, z_dim)
        Reference distribution per class (r_σ = softplus(``r_sigma``)).
    """

    def __init__(self, module: nn.Module, z_dim: int) -> None:
        super().__init__()
        name, head = _head(module)
        self.head_name = name
        self.features = copy.deepcopy(module)
        parent = self.features.get_submodule(name.rpartition(".")[0]) if "." in name else self.features
        setattr(parent, name.rpartition(".")[2], nn.Identity())
        self.z_dim, k = z_dim, head.out_features
        self.enc = nn.Linear(head.in_features, 2 * z_dim, dtype=head.weight.dtype, device=head.weight.device)
        self.cls = nn.Linear(z_dim, k, dtype=head.weight.dtype, device=head.weight.device)
        self.r_mu = nn.Parameter(torch.zeros(k, z_dim, dtype=head.weight.dtype, device=head.weight.device))
        self.r_sigma = nn.Parameter(torch.ones(k, z_dim, dtype=head.weight.dtype, device=head.weight.device))

    def forward(self, x: torch.Tensor, eps: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Logits of z = μ + σ ⊙ ε (ε = 0: the mean), z, μ and σ; shapes (B, K) and (B, z_dim)."""
        h = self.enc(self.features(x))
        mu, sigma = h[:, : self.z_dim], F.softplus(h[:, self.z_dim:])
        z = mu if eps is None else mu + sigma * eps
        return self.cls(z), z, mu, sigma


def fedsr_objective(net: FedSRNet, l2r: float, cmi: float, key: RoundKey, client: int, device: torch.device):
    """The client's loss CE + α_L2R ‖z‖² + α_CMI KL(p(z|x) ‖ r(z|y)) as a :func:`client_sgd` ``objective``.

    Each call (one local step) draws ε ~ N(0, I) of shape (B, z_dim) from ``key.torch(FEDSR_STREAM, client)``.
    """
    gen = key.torch(FEDSR_STREAM, client, device=device)

    def objective(w: Params, x: torch.Tensor, y: torch.Tensor, step: int) -> torch.Tensor:
        eps = torch.randn(x.shape[0], net.z_dim, generator=gen, device=device, dtype=w["r_mu"].dtype)
        logits, z, mu, sigma = torch.func.functional_call(net, w, (x, eps))
        loss = F.cross_entropy(logits, y)
        if l2r:
            loss = loss + l2r * (z * z).sum(1).mean()
        if cmi:
            r_mu, r_sigma = w["r_mu"][y], F.softplus(w["r_sigma"])[y]
            kl = torch.log(r_sigma) - torch.log(sigma) + (sigma**2 + (mu - r_mu) ** 2) / (2 * r_sigma**2) - 0.5
            loss = loss + cmi * kl.sum(1).mean()
        return loss

    return objective


def to_module_params(net: FedSRNet, params: Params) -> Params:
    """The given model's parameters of FedSR's predictor at z = μ: features as they are, head = cls ∘ enc_μ.

    Returns
    -------
    dict[str, Tensor]
        Keyed as the model's ``named_parameters``: ``<head>.weight`` = W_cls W_μ (K, F), ``<head>.bias`` =
        W_cls b_μ + b_cls (K,).
    """
    out = {k.removeprefix("features."): v for k, v in params.items() if k.startswith("features.")}
    w_mu, b_mu = params["enc.weight"][: net.z_dim], params["enc.bias"][: net.z_dim]
    out[f"{net.head_name}.weight"] = params["cls.weight"] @ w_mu
    out[f"{net.head_name}.bias"] = params["cls.weight"] @ b_mu + params["cls.bias"]
    return out


# z_dim ≤ 4096 [ours]: 64 here (fedshift.algorithms.fedsr); a head of 10⁹ units would not fit in memory.
@register(DECLARATIONS[0])
def build_fedsr(
    module: nn.Module,
    *,
    l2r: float,
    cmi: float,
    clients_per_round: int,
    local_epochs: int,
    batch_size: int,
    client_lr: float,
    z_dim: int = 64,
) -> FederatedAlgorithm[FedAvgState]:
    """Build FedSR (Nguyen et al. 2022, §3; module docstring).

    Parameters
    ----------
    module : nn.Module
        The model: its forward must end in its last ``nn.Linear`` (``cnn2``, ``logreg``).
    l2r, cmi : float
        α_L2R >= 0 and α_CMI >= 0 (both 0: FedAvg of the FedSR network, with a sampled representation).
    clients_per_round, local_epochs, batch_size : int
        FedAvg's round: |S| clients uniformly without replacement, E epochs of batches of B.
    client_lr : float
        η > 0.
    z_dim : int
        Dimension of z (default 64 [ours]).

    Returns
    -------
    FederatedAlgorithm[FedAvgState]
        ``init`` takes the model's parameters (w₀) and its state holds the FedSR network's; ``eval_params`` returns
        the model's parameters of the mean-representation predictor (:func:`to_module_params`).

    Raises
    ------
    ValueError
        For negative coefficients, ``client_lr <= 0``, ``z_dim < 1`` or a model without a linear head.
    """
    net = FedSRNet(module, z_dim)
    pool_of = pool_cache()

    def init(params: Params) -> FedAvgState:
        head = params[f"{net.head_name}.weight"]
        seed = int.from_bytes(hashlib.sha256(head.detach().cpu().numpy().tobytes()).digest()[:7], "little")
        fresh = copy.deepcopy(net).to("cpu")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            fresh.enc.reset_parameters()
            fresh.cls.reset_parameters()
        own = {k: v.detach().to(device=head.device, dtype=head.dtype).clone() for k, v in fresh.named_parameters()}
        return FedAvgState(0, own | {f"features.{k}": v.clone() for k, v in params.items()
                                     if not k.startswith(f"{net.head_name}.")}, {})

    def apply(state: FedAvgState, clients: Sequence[ClientData] | ClientPool, key: RoundKey):
        pool, ids = sampled_pool(pool_of, clients, key, clients_per_round, "FedSR")
        params, diag = averaged_round(
            net, state.params, pool, ids, key, epochs=local_epochs, batch_size=batch_size, lr=client_lr,
            client_kwargs=lambda i: {"objective": fedsr_objective(net, l2r, cmi, key, i, pool.x.device)})
        return replace(state, round=state.round + 1, params=params), diag

    def eval_params(state: FedAvgState) -> Params:
        return to_module_params(net, state.params)

    return FederatedAlgorithm("fedsr", init, apply, eval_params, FedAvgState)
