"""A toy own-loop adversarial domain-adaptation method from a test folder: it joins the shift matrix by itself.

The proof of issue 50 that the matrix knows no algorithm by name: ``algorithm_plugins:
[tests/toy_algorithm/toy_dann.py]`` alone makes ``toy_dann`` a row, run in the cells whose shift gives unlabelled
target images and whose model has a feature extractor and a head, n/a elsewhere with the reason — everything from
the one ``@register`` line below.

The method is federated DANN in its plainest form (Ganin & Lempitsky 2015's gradient-reversal layer, as in FADA's
and FedMM's baselines): each sampled client takes ``local_steps`` SGD steps on

    CE(h(f(x_s)), y_s) + ν · BCE(d(GRL(f(x))), domain),

x_s a batch of its labelled source rows and x a batch of source and unlabelled target rows (domain 0 / 1), f the
model's feature extractor, h its head, d a linear domain discriminator; the gradient-reversal layer makes f ascend
what d descends. The server averages the clients' parameters weighted by their source rows. It is a training loop
of its own (``loop="own"``): the clients carry target rows, and the state carries d, which the evaluated model
drops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from fedshift.algorithms.registry import register
from fedshift.core.base import FederatedAlgorithm, Params


@dataclass(frozen=True)
class ToyState:
    """Server state: rounds done and the parameters (the model's, and the discriminator's ``disc.*``)."""

    round: int
    params: Params


@dataclass(frozen=True)
class ToyClient:
    """A client's labelled source rows ``x`` (n, d), ``y`` (n,) and its unlabelled target rows ``target`` (t, d)."""

    client_id: int
    x: torch.Tensor
    y: torch.Tensor
    target: torch.Tensor

    @property
    def num_examples(self) -> int:  # noqa: D102
        return len(self.y)


class _Reverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return -grad


@register("toy_dann", needs=("unlabelled_target",),
          loop="own",
          model_parts=("features", "head"),
          cell="toy_dann:matrix_cell")
def build_toy_dann(module: torch.nn.Module, *, clients_per_round: int, local_steps: int, batch_size: int,
                   client_lr: float, nu: float = 1.0) -> FederatedAlgorithm[ToyState]:
    """Federated DANN with a gradient-reversal layer (module docstring) on ``module``'s features and head.

    ``nu`` is the discriminator loss's weight (DANN's usual 1.0).
    """
    from fedshift.algorithms.fedavg import sample_clients
    from fedshift.algorithms.sgda import model_split

    features, head = model_split(module)
    names = {id(p): n for n, p in module.named_parameters()}

    def loss(params: Params, xs: torch.Tensor, ys: torch.Tensor, xt: torch.Tensor) -> torch.Tensor:
        own = {n: params[n] for n in params if not n.startswith("disc.")}
        z = torch.func.functional_call(features, {k: own[names[id(p)]] for k, p in features.named_parameters()},
                                       (torch.cat([xs, xt]),))
        logits = F.linear(z[: len(xs)], own[names[id(head.weight)]], own[names[id(head.bias)]])
        domain = F.linear(_Reverse.apply(z), params["disc.weight"], params["disc.bias"])[:, 0]
        is_target = torch.cat([torch.zeros(len(xs)), torch.ones(len(xt))]).to(z)
        return F.cross_entropy(logits, ys) + nu * F.binary_cross_entropy_with_logits(domain, is_target)

    def init(params: Params) -> ToyState:
        return ToyState(0, {k: v.detach().clone() for k, v in params.items()})

    def apply(state: ToyState, clients: Any, key: Any) -> tuple[ToyState, dict[str, torch.Tensor]]:
        ids = sample_clients(key, len(clients), min(clients_per_round, len(clients)))
        models, weights, losses = [], [], []
        for i in ids:
            c, g = clients[i], key.numpy(int(i))
            p = {k: v.clone().requires_grad_(True) for k, v in state.params.items()}
            for _ in range(local_steps):
                s = torch.as_tensor(g.choice(len(c.y), min(batch_size, len(c.y)), replace=False))
                t = torch.as_tensor(g.choice(len(c.target), min(batch_size, len(c.target)), replace=False))
                value = loss(p, c.x[s], c.y[s], c.target[t])
                grads = torch.autograd.grad(value, list(p.values()))
                losses.append(float(value.detach()))
                with torch.no_grad():
                    p = {k: (v - client_lr * gr).requires_grad_(True)
                         for (k, v), gr in zip(p.items(), grads, strict=True)}
            models.append({k: v.detach() for k, v in p.items()})
            weights.append(float(len(c.y)))
        w = torch.tensor(weights) / sum(weights)
        avg = {k: sum(wi * m[k] for wi, m in zip(w, models, strict=True)) for k in state.params}
        return ToyState(state.round + 1, avg), {"loss": torch.tensor(sum(losses) / len(losses))}

    def eval_params(state: ToyState) -> Params:
        return {k: v for k, v in state.params.items() if not k.startswith("disc.")}

    return FederatedAlgorithm("toy_dann", init, apply, eval_params, ToyState)


def matrix_cell(name: str, context: Any, instance: Any, train: Any, settings: Any, seed: int
                ) -> tuple[FederatedAlgorithm[ToyState], Params, list[ToyClient]]:
    """The shift matrix's hook: FedAvg's budget (clients per round; local_epochs · ⌈n_max / B⌉ local steps; η)."""
    from fedshift.algorithms import registry
    from fedshift.models import init_params

    from fedshift.algorithms.sgda import model_split

    module = context.module
    held = {int(i): x for i, x in instance.side["unlabelled_target"]}
    clients = [ToyClient(c.client_id, c.x, c.y, held.get(c.client_id, c.x[:0])) for c in instance.clients]
    steps = train["local_epochs"] * math.ceil(max(len(c.y) for c in clients) / train["batch_size"])
    kw = {k: train[k] for k in ("clients_per_round", "batch_size", "client_lr")} | {"local_steps": steps}
    alg = registry.build(name, context, **(kw | dict(settings)))
    device = next(module.parameters()).device
    params0 = dict(init_params(module, seed, device=device))
    _, head = model_split(module)
    g = torch.Generator().manual_seed(seed)
    params0["disc.weight"] = (torch.randn(1, head.in_features, generator=g) * 0.01).to(device)
    params0["disc.bias"] = torch.zeros(1, device=device)
    return alg, params0, clients


#: The factory keyword the hook sets itself.
matrix_cell.supplies = frozenset({"local_steps"})
