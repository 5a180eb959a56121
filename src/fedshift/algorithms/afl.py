"""Stochastic-AFL: agnostic federated learning by stochastic gradient descent-ascent.

Paper: M. Mohri, G. Sivek, A. T. Suresh. *Agnostic Federated Learning.* ICML 2019,
arXiv:1902.00146. Algorithm: Fig. 3 (STOCHASTIC-AFL); stochastic gradients: Fig. 4
(PERDOMAIN and WEIGHTED for w, uniform-domain for λ); regularised objective: eq. (6).

Problem (eq. 6, Λ = Δ_p as in the paper's experiments)::

    min_w max_{λ ∈ Δ_p}  Σ_k λ_k L_k(w) + γ ||w||_2 + μ χ²(λ || m̄),   m̄_k = m_k / m.

One ``apply`` is one step t of Fig. 3: every domain is a client holding that domain's sample;
the server gets the per-domain mini-batch losses and the λ-weighted gradient (sums only), takes a
step on w with a configurable optimiser (plain SGD as analysed; Adagrad/Adam as in §5), projects
w on the ℓ2 ball of radius ``w_radius`` if given, takes a projected ascent step on λ, and updates
the running averages w^A, λ^A that the algorithm outputs. There is no local-training loop (hence no use of
:func:`fedshift.core.engine.local_sgd`): a client computes one stochastic gradient and its losses per step.

Also here: the fixed-mixture baselines of §5 (``lambda_lr = 0``): the uniform model L_Û
(λ = m̄, i.e. ERM on the pooled sample, unbiased per-domain estimator of ∇L_Û) and the
single-domain models L_k (λ = e_k).
"""

from __future__ import annotations

import math
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedshift.algorithms.decl.afl import DECLARATIONS, InitLambda, LambdaGradient, WGradient
from fedshift.algorithms.declarations import OptimizerName
from fedshift.algorithms.registry import register
from fedshift.core.base import ClientData, FederatedAlgorithm, Params
from fedshift.core.engine import ClientPool
from fedshift.core.optim import build_optimizer
from fedshift.core.rng import RoundKey
from fedshift.core.simplex import project_simplex
from fedshift.models import LogisticRegression, forward, logreg_grads

__all__ = ["AFLState", "build_stochastic_afl", "stochastic_gradients", "W_GRADIENTS", "LAMBDA_GRADIENTS"]

W_GRADIENTS = typing.get_args(WGradient)
LAMBDA_GRADIENTS = typing.get_args(LambdaGradient)


@dataclass(frozen=True)
class AFLState:
    """Server state of Stochastic-AFL.

    Attributes
    ----------
    round : int
        Number of steps taken (t in Fig. 3).
    params : dict[str, Tensor]
        Current w_t.
    opt_state : dict
        State of the optimiser of w.
    lam : Tensor, shape (p,)
        Current mixture weight λ_t on the simplex.
    avg_params : dict[str, Tensor]
        Running average w^A = (1/t) Σ_{s=1}^{t} w_s (w_0 before the first step).
    avg_lam : Tensor, shape (p,)
        Running average λ^A.
    """

    round: int
    params: Params
    opt_state: dict[str, Any]
    lam: torch.Tensor
    avg_params: Params
    avg_lam: torch.Tensor


def _sample_plan(
    clients: Sequence[ClientData], lam: np.ndarray, b: int, w_gradient: str, lambda_gradient: str,
    key: RoundKey, need_lambda: bool,
) -> tuple[list[tuple[int, np.ndarray]], np.ndarray, np.ndarray]:
    """Draw the examples of one step.

    Returns ``(draws, w_weight, lam_weight)``: ``draws`` is a list of (domain, example indices)
    blocks in concatenation order; ``w_weight[i]`` multiplies example i's loss in the w-objective;
    ``lam_weight[k, i]`` its contribution to [δ_λ]_k.
    """
    p = len(clients)
    draws: list[tuple[int, np.ndarray]] = []
    w_weight: list[np.ndarray] = []
    lam_cols: list[np.ndarray] = []

    def add(domain: int, idx: np.ndarray, ww: np.ndarray, lw: np.ndarray) -> None:
        draws.append((domain, idx))
        w_weight.append(ww)
        col = np.zeros((p, idx.size))
        col[domain] = lw
        lam_cols.append(col)

    rng_dom = key.numpy(2**31 - 1)  # the server's own stream: domain draws
    perdomain_lam = need_lambda and lambda_gradient == "perdomain"
    if w_gradient == "perdomain":
        for k, c in enumerate(clients):
            if lam[k] == 0.0 and not perdomain_lam:
                continue  # a fixed-mixture run never needs this domain
            idx = key.numpy(c.client_id).integers(0, c.num_examples, size=b)
            add(k, idx, np.full(b, lam[k] / b), np.full(b, 1.0 / b) if perdomain_lam else np.zeros(b))
    else:  # weighted: K ~ λ, one example from domain K, repeated b times
        ks = rng_dom.choice(p, size=b, p=lam / lam.sum())
        for k in range(p):
            n_k = int((ks == k).sum())
            if n_k == 0 and not perdomain_lam:
                continue
            m = n_k if not perdomain_lam else max(n_k, b)
            idx = key.numpy(clients[k].client_id).integers(0, clients[k].num_examples, size=m)
            ww = np.zeros(m)
            ww[:n_k] = 1.0 / b
            add(k, idx, ww, np.full(m, 1.0 / m) if perdomain_lam else np.zeros(m))
    if need_lambda and lambda_gradient == "uniform":
        # Fig. 4: K ~ uniform([p]), I_K ~ uniform([m_K]); [δ_λ]_K = p L_{K,I_K}; mini-batch of b draws.
        ks = key.numpy(2**31 - 2).choice(p, size=b)
        for k in range(p):
            n_k = int((ks == k).sum())
            if n_k:
                idx = key.numpy(clients[k].client_id, 1).integers(0, clients[k].num_examples, size=n_k)
                add(k, idx, np.zeros(n_k), np.full(n_k, p / b))
    return draws, np.concatenate(w_weight), np.concatenate(lam_cols, axis=1)


def stochastic_gradients(
    module: nn.Module, params: Params, lam: torch.Tensor, clients: Sequence[ClientData], key: RoundKey,
    *, batch_size: int, w_gradient: WGradient = "perdomain", lambda_gradient: LambdaGradient = "perdomain",
    need_lambda: bool = True,
) -> tuple[Params, torch.Tensor, torch.Tensor]:
    """Unbiased stochastic gradients δ_w L(w, λ) and δ_λ L(w, λ) (Mohri et al. 2019, Fig. 4).

    Parameters
    ----------
    module : nn.Module
        The model, applied functionally with ``params``.
    params : dict[str, Tensor]
        w.
    lam : Tensor, shape (p,)
        λ on the simplex; client k holds domain k.
    clients : sequence of ClientData, length p
        ``clients[k]`` holds the training sample of domain k.
    key : RoundKey
        Randomness of this step.
    batch_size : int
        b: the number of draws averaged (per domain for PERDOMAIN).
    w_gradient : {"perdomain", "weighted"}
        PERDOMAIN: b examples from every domain, δ_w = Σ_k λ_k mean_b ∇ℓ. WEIGHTED: b draws of
        K ~ λ and one example of domain K each, δ_w = mean ∇ℓ.
    lambda_gradient : {"perdomain", "uniform"}
        "uniform" is Fig. 4 exactly (b draws of K ~ U[p], [δ_λ]_K = p ℓ). "perdomain" uses b
        examples of every domain, [δ_λ]_k = mean loss on domain k: the lower-variance variant of
        §4.4 ("sample one J_k for every domain k"), used by the paper's experiments.
    need_lambda : bool
        If False, δ_λ is not needed (fixed mixture) and domains with λ_k = 0 are not sampled.

    Returns
    -------
    grads : dict[str, Tensor]
        δ_w, same shapes as ``params``.
    delta_lam : Tensor, shape (p,)
        δ_λ (zeros if ``need_lambda`` is False).
    loss : Tensor, scalar
        The w-objective's mini-batch value (Σ_i weight_i ℓ_i), for monitoring.

    Raises
    ------
    ValueError
        For unknown estimator names or a client/domain mismatch.
    """
    if w_gradient not in W_GRADIENTS:
        raise ValueError(f"w_gradient must be one of {W_GRADIENTS}, got {w_gradient!r}")
    if lambda_gradient not in LAMBDA_GRADIENTS:
        raise ValueError(f"lambda_gradient must be one of {LAMBDA_GRADIENTS}, got {lambda_gradient!r}")
    if len(clients) != lam.shape[0]:
        raise ValueError(f"Stochastic-AFL needs one client per domain: {len(clients)} clients, {lam.shape[0]} domains")
    lam_np = lam.detach().cpu().double().numpy()
    draws, w_weight, lam_weight = _sample_plan(
        clients, lam_np, batch_size, w_gradient, lambda_gradient, key, need_lambda
    )
    device, dtype = lam.device, next(iter(params.values())).dtype
    xb = torch.cat([clients[k].x[torch.as_tensor(idx, device=device)] for k, idx in draws])
    yb = torch.cat([clients[k].y[torch.as_tensor(idx, device=device)] for k, idx in draws])
    ww = torch.as_tensor(w_weight, dtype=dtype, device=device)
    grads, per_example = _weighted_grads(module, params, xb, yb, ww)
    if need_lambda:
        delta_lam = torch.as_tensor(lam_weight, dtype=dtype, device=device) @ per_example
    else:
        delta_lam = torch.zeros_like(lam)
    return grads, delta_lam, (per_example * ww).sum()


def _weighted_grads(module: nn.Module, params: Params, x: torch.Tensor, y: torch.Tensor,
                    ww: torch.Tensor) -> tuple[Params, torch.Tensor]:
    """∇_w Σ_i ww_i ℓ(w; x_i, y_i) and the per-example losses ℓ_i (detached).

    Logistic regression uses the closed form (:func:`fedshift.models.logreg_grads`, which also takes
    a leading run axis); other models use ``torch.func.grad`` (``vmap``-able over a run axis).
    """
    if type(module) is LogisticRegression:
        return logreg_grads(params, x, y, ww)

    def objective(p: Params) -> tuple[torch.Tensor, torch.Tensor]:
        per_example = F.cross_entropy(forward(module, p, x), y, reduction="none")
        return (per_example * ww).sum(), per_example.detach()

    grads, per_example = torch.func.grad(objective, has_aux=True)(params)
    return grads, per_example


# Over 80 lines: a FedJAX-style factory — a 70-line docstring and the init/apply closures of Fig. 3's one step.
@register(DECLARATIONS[0])
def build_stochastic_afl(
    module: nn.Module,
    *,
    num_domains: int,
    domain_sizes: Sequence[int],
    batch_size: int,
    client_lr: float,
    lambda_lr: float,
    optimizer: OptimizerName = "sgd",
    optimizer_kwargs: dict[str, Any] | None = None,
    w_gradient: WGradient = "perdomain",
    lambda_gradient: LambdaGradient = "perdomain",
    init_lambda: InitLambda = "uniform",
    w_radius: float | None = None,
    gamma: float = 0.0,
    mu: float = 0.0,
    average_iterates: bool = True,
    seeds: Sequence[int] | None = None,
) -> FederatedAlgorithm[AFLState]:
    """Build Stochastic-AFL (Mohri et al. 2019, Fig. 3) or a fixed-mixture baseline.

    Parameters
    ----------
    module : nn.Module
        The model (logistic regression in §5).
    num_domains : int
        p.
    domain_sizes : sequence of int, length p
        m_k, the training-sample sizes; give m̄ = m_k/m for the χ² regulariser and ``"empirical"``.
    batch_size : int
        b (> 0), draws per stochastic gradient (per domain for PERDOMAIN).
    client_lr : float
        γ_w, step size of the optimiser of w (> 0).
    lambda_lr : float
        γ_λ (>= 0). 0 keeps λ fixed at ``init_lambda``: the fixed-mixture baselines of §5.
    optimizer : {"sgd", "adagrad", "adam"}
        Optimiser of w; SGD is Fig. 3 as analysed, Adagrad (Adult) and Adam (Fashion-MNIST) are §5.
    optimizer_kwargs : dict, optional
        Extra optimiser hyper-parameters (momentum, betas, eps).
    w_gradient : {"perdomain", "weighted"}
    lambda_gradient : {"perdomain", "uniform"}
        Stochastic-gradient estimators, see :func:`stochastic_gradients` (declared choices, :data:`WGradient`,
        :data:`LambdaGradient` of :mod:`fedshift.algorithms.decl.afl`: a config outside them is refused before
        any job, a direct call when it is made).
    init_lambda : "uniform", "empirical" or sequence of p floats
        λ_0: uniform 1/p, m̄ (the pooled-sample mixture of L_Û), or explicit (e.g. e_k); must lie
        on the simplex.
    w_radius : float, optional
        R_W: project w on the ℓ2 ball of this radius after each step (Fig. 3, step 2).
    gamma : float
        γ >= 0 of eq. (6): adds γ ∇||w||_2 (a subgradient, 0 at w = 0) to δ_w.
    mu : float
        μ >= 0 of eq. (6): adds μ ∇_λ χ²(λ||m̄) = 2μ(λ − m̄)/m̄ to δ_λ, with the paper's sign
        (eq. 6 adds +μχ² inside the max over λ: the learning bound's skewness penalty). This term
        pushes λ *away* from m̄ and makes the λ-objective convex rather than concave, so Fig. 3's
        guarantee does not cover μ > 0; the paper's experiments (and our configs) use μ = 0.
    average_iterates : bool
        Output w^A (True, Fig. 3) or the last iterate.
    seeds : sequence of int, optional
        Run several independent runs at once (the batched path): every state tensor gets a
        leading run axis of size R = len(seeds), run r draws its batches from
        ``RoundKey(seeds[r], t)`` (so it equals the single run with that seed), and the runs'
        gradients are computed together (``vmap`` over runs; closed form with batched matrix
        products for logistic regression). ``init`` then takes stacked initial parameters
        (R, ...), and ``apply`` ignores the key's seed.

    Returns
    -------
    FederatedAlgorithm[AFLState]

    Raises
    ------
    ValueError
        On invalid hyper-parameters (before any training).
    """
    if num_domains < 1 or len(domain_sizes) != num_domains:
        raise ValueError(f"need {num_domains} domain sizes, got {len(domain_sizes)}")
    opt = build_optimizer(optimizer, lr=client_lr, **(optimizer_kwargs or {}))
    sizes = np.asarray(domain_sizes, dtype=np.float64)
    m_bar = sizes / sizes.sum()
    if isinstance(init_lambda, str):  # one of the declared choices: registration checks every call
        lam0 = np.full(num_domains, 1.0 / num_domains) if init_lambda == "uniform" else m_bar
    else:
        lam0 = np.asarray(init_lambda, dtype=np.float64)
        if lam0.shape != (num_domains,) or (lam0 < 0).any() or abs(lam0.sum() - 1) > 1e-9:
            raise ValueError(f"init_lambda must be a point of the {num_domains}-simplex, got {lam0.tolist()}")
    learn_lambda = lambda_lr > 0
    multi = seeds is not None
    if multi and len(seeds) < 1:
        raise ValueError("seeds must hold at least one seed")
    cache: dict[str, Any] = {}
    if type(module) is LogisticRegression:  # the closed form takes the run axis as it is
        batched_grads = logreg_grads
    else:
        batched_grads = torch.func.vmap(lambda p, x, y, w: _weighted_grads(module, p, x, y, w))

    def init(params: Params) -> AFLState:
        ref = next(iter(params.values()))
        lam = torch.as_tensor(lam0, dtype=ref.dtype, device=ref.device)
        if multi:
            if ref.shape[0] != len(seeds):
                raise ValueError(f"multi-run init needs parameters stacked over {len(seeds)} runs")
            lam = lam.expand(len(seeds), num_domains).clone()
        params = {k: v.clone() for k, v in params.items()}
        return AFLState(0, params, opt.init(params), lam, {k: v.clone() for k, v in params.items()}, lam.clone())

    def plan(clients: Sequence[ClientData], lam: torch.Tensor, t: int):
        """Draws of every run, padded to one length: global rows, w-weights, λ-weights."""
        if cache.get("clients") is not clients:  # gathered once per client list (held: no id reuse)
            cache.update(clients=clients, pool=ClientPool.from_clients(clients))
        pool = cache["pool"]
        lam_np = lam.detach().cpu().double().numpy()
        plans = []
        for r, seed in enumerate(seeds):
            draws, ww, lw = _sample_plan(clients, lam_np[r], batch_size, w_gradient, lambda_gradient,
                                         RoundKey(seed, t), learn_lambda)
            plans.append((np.concatenate([pool.offsets[k] + idx for k, idx in draws]), ww, lw))
        n = max(len(g) for g, _, _ in plans)
        R = len(seeds)
        gidx, w_all, l_all = np.zeros((R, n), np.int64), np.zeros((R, n)), np.zeros((R, num_domains, n))
        for r, (g, ww, lw) in enumerate(plans):
            gidx[r, : len(g)], w_all[r, : len(g)], l_all[r, :, : len(g)] = g, ww, lw
        dev, dt = lam.device, lam.dtype
        gidx_t = torch.as_tensor(gidx, device=dev)
        return (pool.x[gidx_t], pool.y[gidx_t], torch.as_tensor(w_all, dtype=dt, device=dev),
                torch.as_tensor(l_all, dtype=dt, device=dev))

    def sqnorm(params: Params) -> torch.Tensor:  # per run when multi, else scalar
        return sum((v * v).flatten(1).sum(1) if multi else (v * v).sum() for v in params.values())

    def bcast(v: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        return v.view(-1, *[1] * (like.ndim - 1)) if multi else v

    def apply(
        state: AFLState, clients: Sequence[ClientData], key: RoundKey
    ) -> tuple[AFLState, dict[str, torch.Tensor]]:
        if multi:
            xb, yb, ww, lw = plan(clients, state.lam, key.round)
            grads, per_example = batched_grads(state.params, xb, yb, ww)
            delta_lam = torch.einsum("rpn,rn->rp", lw, per_example)
            loss = (per_example * ww).sum(1)
        else:
            grads, delta_lam, loss = stochastic_gradients(
                module, state.params, state.lam, clients, key, batch_size=batch_size,
                w_gradient=w_gradient, lambda_gradient=lambda_gradient, need_lambda=learn_lambda,
            )
        if gamma > 0:  # γ ∇||w||_2 = γ w/||w|| (0 at w = 0), without a host synchronisation
            norm = sqnorm(state.params).sqrt()
            inv = torch.where(norm > 0, 1.0 / norm.clamp_min(1e-30), torch.zeros_like(norm))
            grads = {k: g + gamma * state.params[k] * bcast(inv, g) for k, g in grads.items()}
        params, opt_state = opt.step(state.params, grads, state.opt_state)
        if w_radius is not None:
            scale = torch.clamp(w_radius / sqnorm(params).sqrt(), max=1.0)
            params = {k: v * bcast(scale, v) for k, v in params.items()}
        lam = state.lam
        if learn_lambda:
            g_lam = delta_lam
            if mu > 0:
                mb = torch.as_tensor(m_bar, dtype=lam.dtype, device=lam.device)
                g_lam = g_lam + 2.0 * mu * (lam - mb) / mb
            lam = project_simplex(lam + lambda_lr * g_lam, check_finite=False)
        t = state.round + 1
        avg_params = {k: a + (params[k] - a) / t for k, a in state.avg_params.items()}
        avg_lam = state.avg_lam + (lam - state.avg_lam) / t
        new = replace(state, round=t, params=params, opt_state=opt_state, lam=lam,
                      avg_params=avg_params, avg_lam=avg_lam)
        diag = {"loss": loss, "lambda": lam}
        if learn_lambda:  # fixed-mixture baselines draw no λ-gradient: no per-domain losses to report
            diag["domain_loss"] = delta_lam
        return new, diag

    def eval_params(state: AFLState) -> Params:
        return state.avg_params if average_iterates and state.round > 0 else state.params

    return FederatedAlgorithm("stochastic_afl", init, apply, eval_params, AFLState)


# ---- the shift matrix's cell hook (its declaration's ``cell``) -------------------------------------------------------
def steps_per_round(train: Mapping[str, Any], sizes: Sequence[int], num_domains: int) -> int:
    """S, the steps of Fig. 3 in one common round: ⌈clients_per_round · local_epochs · n̄ / (p · B)⌉, at least 1.

    A common round (FedAvg's) evaluates clients_per_round · local_epochs · n̄ per-example gradients (n̄ the mean
    client size); one PERDOMAIN step draws B rows of each of the p domains. [ours] The gradient count is the cost
    every method pays on the clients; a count of local *steps* would give AFL p times fewer examples.
    """
    cpr = min(train["clients_per_round"], len(sizes))
    examples = cpr * train["local_epochs"] * sum(sizes) / len(sizes)
    return max(1, math.ceil(examples / (num_domains * train["batch_size"])))


def domain_clients(clients: Sequence[ClientData], domain_ids: Sequence[int]) -> list[ClientData]:
    """One client per domain k (id k): the rows of every client whose domain id is k (Fig. 3's per-domain samplers).

    Returns
    -------
    list of ClientData
        p clients: ``x`` (n_k, d) float32 inputs, ``y`` (n_k,) int64 labels, n_k the domain's training rows.

    Raises
    ------
    ValueError
        If a domain id has no client.
    """
    out = []
    for k in range(max(domain_ids) + 1):
        mine = [c for c, d in zip(clients, domain_ids, strict=True) if d == k]
        if not mine:
            raise ValueError(f"Stochastic-AFL: domain {k} has no client")
        out.append(ClientData(k, torch.cat([c.x for c in mine]), torch.cat([c.y for c in mine]), k))
    return out


def repeat_steps(inner: FederatedAlgorithm, steps: int) -> FederatedAlgorithm:
    """``inner`` with ``steps`` of its ``apply`` per round; step s of round t uses ``RoundKey(seed, t·steps + s)``."""

    def apply(state: Any, clients: Sequence[Any], key: RoundKey):
        diag = {}
        for s in range(steps):
            state, diag = inner.apply(state, clients, RoundKey(key.seed, key.round * steps + s))
        return state, diag

    return replace(inner, apply=apply)


def matrix_cell(name: str, context: Any, instance: Any, train: Mapping[str, Any], settings: Mapping[str, Any],
                seed: int) -> tuple[FederatedAlgorithm, Params, list[ClientData]]:
    """Stochastic-AFL on a common per-round budget: the shift matrix's cell hook (its declaration's ``cell``).

    One round is :func:`steps_per_round` steps of Fig. 3 (Mohri et al. 2019) on one client per domain
    (:func:`domain_clients` of the shift's ``domain_ids``), so that a round evaluates as many per-example gradients
    as FedAvg's. γ_w is the common ``client_lr`` (a grid value may set it); the settings tune γ_λ (``lambda_lr``)
    and the estimators. The evaluated model is w^A, the average of all iterates (Fig. 3).

    Parameters
    ----------
    name : str
        ``"afl"``.
    context : BuildContext
        The cell's model (``context.module``).
    instance : fedshift.shifts.Instance
        A seed of a shift that gives ``domain_ids``.
    train : mapping
        The common round: ``clients_per_round``, ``local_epochs``, ``batch_size``, ``client_lr``.
    settings : mapping
        The method's fixed settings and grid value; they win over the common ones.
    seed : int
        w₀ = ``init_params(context.module, seed)``.

    Returns
    -------
    algorithm, params0, clients
    """
    from fedshift.algorithms import registry
    from fedshift.models import init_params

    ids = instance.side["domain_ids"]
    clients = domain_clients(instance.clients, ids)
    kw = {"batch_size": train["batch_size"], "client_lr": float(train["client_lr"])} | dict(settings)
    for k in ("clients_per_round", "local_epochs"):
        kw.pop(k, None)
    sizes = [c.num_examples for c in clients]
    own = registry.BuildContext(context.module, num_domains=len(clients), domain_sizes=sizes)
    inner = registry.build(name, own, **kw)
    steps = steps_per_round(train, [c.num_examples for c in instance.clients], len(clients))
    device = next(context.module.parameters()).device
    return repeat_steps(inner, steps), init_params(context.module, seed, device=device), clients
