"""One cell of the shift matrix: its model, its algorithm built on the common budget, and its training.

Which algorithm runs in which cell, and why a cell is "n/a", is read from the algorithms' declarations
(:mod:`.rows`). A cell builds its algorithm in one of two ways, neither of which names an algorithm:

* no cell hook declared (``register(..., cell=...)`` absent): the common round — one model module, the common
  round's keywords (``clients_per_round``, ``local_epochs``, ``batch_size``, ``client_lr``), the method's fixed
  settings and one value of its hyper-parameter grid, through :func:`fedshift.algorithms.registry.build` with the
  cell's data as context (:func:`cell_context`: the number of clients and domains, T from the shift's side
  information and S from the clients' labels); w₀ = ``init_params(module, seed)``; the clients as they are;
* a cell hook: the hook builds the algorithm, its w₀ and the form of the clients its ``apply`` takes on the same
  budget (:mod:`.rows` states its contract); e.g. Stochastic-AFL's per-domain steps
  (:func:`fedshift.algorithms.afl.matrix_cell`), the DANN family's network of the CNN
  (:func:`fedshift.algorithms.sgda.dann_cell`), FedPALS's λ from an ESS
  (:func:`fedshift.algorithms.fedpals.matrix_cell`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fedshift.algorithms import registry
from fedshift.core.base import Params
from fedshift.models import build_model, init_params
from fedshift.papers.shift_matrix import rows
from fedshift.shifts import Instance

__all__ = ["cell_context", "common_round", "model_of", "setup_cell", "rungs", "successive_halving",
           "validation_loss", "Tuned", "FIRST_RUNG_FRACTION"]

#: [ours] the earliest first halving cut, as a fraction of the full budget R: the first rung ends at round
#: ``max(1, ceil(FIRST_RUNG_FRACTION · R))`` or later (:func:`rungs`), so no configuration is dropped on the noise of
#: its first few percent of training.
FIRST_RUNG_FRACTION = 0.05


def cell_context(module: Any, instance: Instance) -> registry.BuildContext:
    """What a cell's data gives the factories (:class:`~fedshift.algorithms.registry.BuildContext`).

    The number of clients; with the shift's ``domain_ids`` the number of domains p; with its target label marginal
    T, T and the clients' own label marginals S (FedPALS), over the shift's ``num_labels`` classes.
    """
    from fedshift.partition import label_marginals

    side = instance.side
    t = s = None
    if "target_label_marginal" in side:
        y = [c.y.cpu().numpy() for c in instance.clients]
        offsets = np.cumsum([0] + [len(v) for v in y])
        s = label_marginals(np.concatenate(y), [np.arange(offsets[i], offsets[i + 1]) for i in range(len(y))],
                            instance.num_labels)
        t = np.asarray(side["target_label_marginal"], dtype=np.float64)
    return registry.BuildContext(module, num_clients=len(instance.clients),
                                 num_domains=max(side["domain_ids"]) + 1 if "domain_ids" in side else None,
                                 target_label_marginal=t, client_label_marginals=s)


def common_round(train: Mapping[str, Any], instance: Instance) -> dict[str, Any]:
    """The common round's keywords (:data:`.rows.OFFERED`) of ``train``, participants capped at the clients."""
    kw = {k: train[k] for k in rows.OFFERED}
    kw["clients_per_round"] = min(kw["clients_per_round"], len(instance.clients))
    return kw


def model_of(name: str, image_side: int, num_labels: int) -> torch.nn.Module:
    """The matrix's model family on a shift's common format (grey ``image_side``² inputs, ``num_labels`` classes).

    ``logreg`` (MLR) or ``cnn2`` (the small two-layer CNN, :class:`fedshift.models.TwoLayerCNN`).

    Raises
    ------
    ValueError
        For another name.
    """
    if name == "logreg":
        return build_model("logreg", input_dim=image_side * image_side, num_classes=num_labels)
    if name == "cnn2":
        return build_model("cnn2", num_classes=num_labels, in_channels=1, image_size=image_side)
    raise ValueError(f"shift_matrix.model: expected one of {sorted(rows.MODEL_PARTS)}, got {name!r}")


def setup_cell(name: str, module: torch.nn.Module, instance: Instance, seed: int, *, train: Mapping[str, Any],
               fixed: Mapping[str, Any], value: Mapping[str, Any]) -> tuple[Any, Params, Any]:
    """Algorithm ``name`` of one grid ``value``, its w₀ and the clients its ``apply`` takes (one seed of a cell).

    Through the algorithm's cell hook when it declares one (the settings its hook's keyword-only parameters name go
    to those), else on the common round (module docstring).

    Returns
    -------
    algorithm, params0, clients

    Raises
    ------
    ValueError
        From :func:`fedshift.algorithms.registry.build` for a keyword the factory rejects.
    """
    settings = dict(fixed) | dict(value)
    context = cell_context(module, instance)
    common = common_round(train, instance)
    hook = rows.hook(name)
    if hook is not None:
        own = {k: settings.pop(k) for k in rows.hook_keys(name) if k in settings}
        return hook(name, context, instance, common, settings, seed, **own)
    device = next(module.parameters()).device
    return (registry.build(name, context, **(common | settings)), init_params(module, seed, device=device),
            instance.clients)


def rungs(rounds: int, configurations: int, eta: int, first_fraction: float = FIRST_RUNG_FRACTION
          ) -> list[tuple[int, int]]:
    """The rungs of successive halving: (rounds trained by the end of the rung, configurations kept into it).

    Jamieson & Talwalkar (AISTATS 2016), Algorithm 1, as the inner loop of Hyperband (Li et al., JMLR 2018):
    with n configurations and a reduction factor η there are s + 1 rungs, s = ⌈log_η n⌉; rung k trains
    ⌈n / η^k⌉ configurations to R · η^(k − s) rounds (rounded to the nearest round), the last rung one
    configuration to the full R. Training continues from the previous rung (the same rounds as one run of R).
    [ours] No rung ends before ``r_min = max(1, ceil(first_fraction · R))`` (default
    :data:`FIRST_RUNG_FRACTION` = 5 %): the first halving cut comes at ``max(r_min, round(R / η^s))`` rounds or
    later, and a rung this floor would make end no later than the one before is left out (its cut merges into the
    next). With n = 9, η = 3 the floor binds only where R / 9 rounds to under 5 % of R, i.e. never for R ≥ 1
    (R / 9 ≈ 11 %); it binds for wider grids (n = 81: R / 81 ≈ 1.2 %).

    Parameters
    ----------
    rounds : int
        R, the full budget of one configuration.
    configurations : int
        n ≥ 1.
    eta : int
        η ≥ 2 (3: a third of the configurations survive each rung).
    first_fraction : float
        The floor of every rung's end as a fraction of R, in [0, 1] (default :data:`FIRST_RUNG_FRACTION`).

    Returns
    -------
    list of (int, int)
        Per rung, its end round and the number of configurations trained in it; one rung (R, n) when n = 1. A
        rung that would end no later than the one before (R too small for s + 1 rungs) is left out.

    Raises
    ------
    ValueError
        For n < 1, η < 2, R < 1 or ``first_fraction`` outside [0, 1].
    """
    if configurations < 1 or eta < 2 or rounds < 1:
        raise ValueError(f"successive halving needs n >= 1, eta >= 2, R >= 1; got {configurations}, {eta}, {rounds}")
    if not 0 <= first_fraction <= 1:
        raise ValueError(f"successive halving: first_fraction must lie in [0, 1], got {first_fraction}")
    s = math.ceil(math.log(configurations, eta) - 1e-9)
    floor = max(1, math.ceil(first_fraction * rounds - 1e-9))  # − 1e-9: 0.05 · 200 is 10, not 11
    out: list[tuple[int, int]] = []
    for k in range(s + 1):
        end = max(floor, round(rounds * eta ** (k - s)))
        if out and end <= out[-1][0]:  # too few rounds for this rung: the previous one is also its end
            continue
        out.append((end, max(1, math.ceil(configurations / eta ** k))))
    return out


def validation_loss(module: torch.nn.Module, params: Params, population: Any) -> float:
    """Mean cross-entropy (nats) of a model on a population: the tie-break of :func:`successive_halving`.

    Parameters
    ----------
    module : torch.nn.Module
        The matrix model (:func:`model_of`), evaluated at ``params`` (:func:`fedshift.models.forward`).
    params : dict of str to Tensor
        Its parameters.
    population : fedshift.shifts.Population
        Inputs ``x`` (n, side²) and labels ``y`` (n,); the shift's *validation* population (clean inputs, also on
        the adversarial shift, whose primary score attacks them).

    Returns
    -------
    float
        ``mean_i −log softmax(f(x_i))[y_i]``; NaN or inf where the model's outputs are not finite.
    """
    import torch.nn.functional as F

    from fedshift.models import forward

    with torch.no_grad():
        return float(F.cross_entropy(forward(module, params, population.x), population.y))


@dataclass
class Tuned:
    """One seed's successive halving of a cell: what each grid value reached and the survivor.

    Attributes
    ----------
    params : list of (dict or None)
        Per grid value, the final parameters of the survivor, None for every other (eliminated or diverged).
    validation : list of float
        Per grid value, its primary validation score at the last rung where it was scored (NaN: diverged); the
        survivor of a last rung of one value is not scored again there (the evaluation scores it).
    rounds : list of int
        Per grid value, the rounds it trained.
    chosen : int or None
        The survivor (None when every value diverged).
    validation_loss : list of float
        Per grid value, its mean validation cross-entropy (:func:`validation_loss`) where ``validation`` was
        scored (NaN elsewhere): the tie-break between equal scores.
    history : list of dict
        Training rows ``grid, round, loss`` (each rung's mean loss).
    cpu_seconds : float
        CPU time (user + system, this process) of the whole tuning.
    diverged : list of dict
        ``{"grid", "error"}`` per value whose loss became non-finite.
    """

    params: list[Params | None]
    validation: list[float]
    rounds: list[int]
    chosen: int | None
    validation_loss: list[float] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    cpu_seconds: float = 0.0
    diverged: list[dict[str, Any]] = field(default_factory=list)


def successive_halving(name: str, instance: Instance, seed: int, *, model: str, train: Mapping[str, Any],
                       fixed: Mapping[str, Any], grid: Sequence[Mapping[str, Any]], device: Any,
                       score: Callable[[torch.nn.Module, Params], float], eta: int | None = 3) -> Tuned:
    """Tune algorithm ``name`` over ``grid`` on one seed by successive halving on the validation score.

    Every grid value starts from the same w₀ (``init_params(module, seed)``, :func:`setup_cell`) and draws the same
    clients and batches (``RoundKey(seed, round)``): the grid values and the algorithms of a seed differ only in the
    method. It trains rung by rung (:func:`rungs`): rung k trains the n_k values best on
    ``score`` at the rung before (higher is better; between equal scores the lower validation loss,
    :func:`validation_loss`, then the grid's order), from where they stopped. A value whose loss or parameters
    become non-finite is dropped, and the next value of the ranking takes its place (retrained from its last
    rung's state, or from w₀), so a cell loses its result only when every value diverges. The survivor has
    trained the full ``train["rounds"]``: its parameters are those of one uninterrupted run of that value. Never
    reads test data: ``score`` is the validation metric.

    Parameters
    ----------
    name : str
        The registered algorithm.
    instance : fedshift.shifts.Instance
        One seed of the shift.
    seed : int
        The seed (w₀, client draws and batches).
    model : str
        The matrix model (:func:`model_of`).
    train : mapping
        The common round (:data:`.rows.OFFERED`) and ``rounds``, the full budget R.
    fixed : mapping
        The algorithm's fixed settings.
    grid : sequence of mapping
        The grid values.
    device : torch.device or str
        Where the cell trains.
    score : callable
        ``score(module, params) -> float``, the primary validation metric of the shift.
    eta : int or None
        The reduction factor η (default 3, Li et al. 2018's); None trains every value to the full budget (the
        exhaustive grid) and keeps the best.

    Returns
    -------
    Tuned
    """
    from fedshift.core.rng import RoundKey

    t0 = time.process_time()
    module = model_of(model, instance.image_side, instance.num_labels).to(device)
    n = len(grid)
    runs: list[Any] = [None] * n
    validation, losses_val, reached = [math.nan] * n, [math.nan] * n, [0] * n
    history, diverged = [], []
    ranking = list(range(n))  # the order of preference the previous rung left (first: the grid's order)
    dead: set[int] = set()
    plan = rungs(train["rounds"], n, eta) if eta else [(train["rounds"], n)]
    for end, count in plan:
        trained = []
        for g in ranking:
            if len(trained) == count:
                break
            if runs[g] is None:
                alg, params0, data = setup_cell(name, module, instance, seed, train=train, fixed=fixed, value=grid[g])
                runs[g] = [alg, alg.init(params0), data]
            alg, state, data = runs[g]
            losses = []
            for r in range(reached[g], end):
                state, diag = alg.apply(state, data, RoundKey(seed, r))
                losses.append(float(torch.as_tensor(diag["loss"]).mean()))
            reached[g], runs[g][1] = end, state
            mean_loss = float(np.mean(losses)) if losses else math.nan
            params = alg.eval_params(state)
            if (losses and not math.isfinite(mean_loss)) or not all(torch.isfinite(v).all() for v in params.values()):
                diverged.append({"grid": g, "error": f"loss became {mean_loss} by round {end}"})
                validation[g], runs[g] = math.nan, None
                dead.add(g)
                continue  # a diverged value is dropped: the next one of the ranking takes its place
            history.append({"grid": g, "round": end, "loss": mean_loss})
            if count > 1 or end != plan[-1][0]:  # the last rung's lone survivor needs no score to be chosen
                validation[g] = float(score(module, params))
                losses_val[g] = validation_loss(module, params, instance.validation)
            trained.append(g)
        # ties on the score: the lower validation loss (a non-finite one last), then the grid's order
        ranked = sorted(trained, key=lambda g: (-validation[g], _finite_or_inf(losses_val[g]), g))
        # the next rung promotes from this rung's ranking, then (as replacements) from the earlier rungs' order
        ranking = ranked + [g for g in ranking if g not in trained and g not in dead]
    chosen = ranked[0] if ranked else None
    out: list[Params | None] = [None] * n
    if chosen is not None:
        alg, state, _ = runs[chosen]
        out[chosen] = alg.eval_params(state)
    return Tuned(out, validation, reached, chosen, validation_loss=losses_val, history=history,
                 cpu_seconds=time.process_time() - t0, diverged=diverged)


def _finite_or_inf(x: float) -> float:
    """``x`` where finite, else +inf (a NaN loss sorts after every finite one)."""
    return x if math.isfinite(x) else math.inf
