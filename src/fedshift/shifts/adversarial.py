"""Adversarial covariate shift (WAFL, ICLR 2022 submission, arXiv:2206.01432, §6 and Fig. 4).

M clients hold Dirichlet label-skewed shares of the training split; each client's share is cut into its
training rows, its validation rows and its test rows (WAFL's per-client train/test split). At evaluation, the
test rows of a fraction f of the clients are moved by an ℓ∞ attack against the evaluated model (ε-ball radius
``pgd.eps``, in [0, 1] pixel units, no box: as WAFL's official code nothing clips to [0, 1]), the others stay clean,
and the accuracy is taken over all rows (:func:`fedshift.core.metrics.shifted_metrics`; which clients are attacked:
:func:`~fedshift.core.metrics.attacked_clients`, stream 0 on test and the independent stream 1 on
validation, as WAFL's own evaluation). One metric per f ∈ ``fractions`` (WAFL: 0, 0.4, 0.8). No side information.

The attack (``pgd.attack``): ``apgd`` (the default), :func:`fedshift.algorithms.robustness.apgd_linf`: Auto-PGD with
the DLR loss, then the cross-entropy and ``pgd.targets`` targeted margins on the rows left (ART), ``pgd.steps``
iterations each, which does not mask on saturated models; ``ce``, :func:`fedshift.algorithms.adversarial.pgd_linf`:
WAFL's official cross-entropy PGD with step ``pgd.step`` and no random start, whose gradient is exactly 0 where
float32's softmax saturates (an MLR trained with a large server step reports tens of points of robustness it does
not have; the module docstring of :mod:`fedshift.algorithms.robustness`). Only the rows of the clients attacked at
the largest f are attacked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from fedshift.partition import dirichlet_partition
from fedshift.shifts import Partition, Population, Segment, Shift, demand_problems, register_shift

if TYPE_CHECKING:  # the plan imports no torch (fedshift.shifts); the metric imports it where it runs
    import torch

STREAM = 30


#: The attacks of ``pgd.attack``: Auto-PGD (DLR, CE, targeted margin; the default) and WAFL's cross-entropy PGD.
ATTACKS = ("apgd", "ce")


def attack_rows(module: torch.nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                pgd: Mapping[str, Any], *, seed: int | list[int],
                where: str = "shift_matrix.shifts.<name>.pgd") -> torch.Tensor:
    """``x`` moved by the configured ℓ∞ attack against the model (module docstring).

    Parameters
    ----------
    module, params
        The evaluated model, applied functionally.
    x : Tensor, shape (n, ...)
        The rows to attack.
    y : Tensor, shape (n,)
        Their labels.
    pgd : mapping
        The shift's ``pgd``: ``eps``, ``steps``, ``attack`` (``apgd``, default, or ``ce``), for ``apgd`` ``targets``
        (default 3) and for ``ce`` ``step``.
    seed : int or list of int
        Seeds APGD's random starts (``ce`` has none).
    where : str
        The key path of ``pgd`` in the config, for the errors.

    Returns
    -------
    Tensor
        x' with ‖x' − x‖∞ ≤ ``eps``, shape of ``x``.

    Raises
    ------
    ValueError
        For an unknown ``pgd.attack`` or ``ce`` without ``pgd.step`` (named by their key path).
    """
    kind = pgd.get("attack", "apgd")
    if kind == "apgd":
        from fedshift.algorithms.robustness import apgd_linf

        return apgd_linf(module, params, x, y, eps=pgd["eps"], steps=pgd["steps"], targets=pgd.get("targets", 3),
                         seed=seed)
    if kind == "ce":
        if "step" not in pgd:
            raise ValueError(f"{where}.step: attack 'ce' needs its step size")
        from fedshift.algorithms.adversarial import pgd_linf

        return pgd_linf(module, params, x, y, eps=pgd["eps"], step=pgd["step"], steps=pgd["steps"])
    raise ValueError(f"{where}.attack: unknown attack {kind!r}; one of {list(ATTACKS)}")


def fraction_id(f: float) -> str:
    """Metric name of the accuracy at attacked fraction f (``accuracy_f0.4``)."""
    return f"accuracy_f{f:g}"


@register_shift
class AdversarialShift(Shift):
    """A fraction of the clients' test data moved by PGD against the model (module docstring)."""

    kind = "adversarial"

    @classmethod
    def protocol(cls, params: Mapping[str, Any], sizes: Callable[[str, str], int | None]) -> list[tuple[str, str]]:
        """Every client's train, validation and test rows within the training split (all three are cut from it)."""
        p = params
        rows = p["clients"] * (p["train_per_client"] + p["validation_per_client"] + p["test_per_client"])
        return demand_problems([("clients", p["dataset"], "train", rows)], sizes)

    def partition(self, data: Mapping[str, Mapping[str, Any]], seed: int) -> Partition:
        """Dirichlet shares of ``train + validation + test`` rows per client, each cut in that order after a shuffle."""
        p, d = self.params, self.params["dataset"]
        n = p["train_per_client"] + p["validation_per_client"] + p["test_per_client"]
        shares = dirichlet_partition(data[d]["y_train"].numpy(), num_clients=p["clients"], beta=p["beta"],
                                     num_labels=self.num_labels, seed=[seed, STREAM], samples_per_client=n)
        rng = np.random.default_rng([seed, STREAM, 1])
        clients, val, test = [], [], []
        for i, share in enumerate(shares):
            perm = rng.permutation(share)
            a = max(1, round(len(perm) * p["train_per_client"] / n))
            b = a + max(1, round(len(perm) * p["validation_per_client"] / n))
            clients.append(Segment(d, "train", np.sort(perm[:a]), 0))
            val.append(Segment(d, "train", np.sort(perm[a:b]), i))
            test.append(Segment(d, "train", np.sort(perm[b:]), i))
        return Partition(clients, val, test, info={"fractions": list(p["fractions"])})

    def metrics(self) -> list[str]:
        """``accuracy_f<f>`` per fraction, the largest fraction first (the primary metric)."""
        return [fraction_id(f) for f in sorted(self.params["fractions"], reverse=True)]

    def metric(self, module: torch.nn.Module, params: dict[str, torch.Tensor], population: Population, *,
               role: str, seed: int) -> dict[str, float]:
        """Accuracy over all clients' rows with fraction f of the clients attacked, per f."""
        import torch
        import torch.nn.functional as F

        from fedshift.core.metrics import attacked_clients, shifted_metrics
        from fedshift.models import forward

        pgd, stream = self.params["pgd"], 1 if role == "validation" else 0
        # the attacked clients are nested in f: those of the largest f are every row any fraction moves
        hit = attacked_clients(self.params["clients"], max(self.params["fractions"]), seed, stream)
        moved = torch.as_tensor(np.isin(population.group, hit), device=population.x.device)
        x_adv = population.x.clone()
        x_adv[moved] = attack_rows(module, params, population.x[moved], population.y[moved], pgd, seed=[seed, stream],
                                   where=f"shift_matrix.shifts.{self.name}.pgd")
        per_client = {"clean": [], "shifted": []}
        with torch.no_grad():
            for key, x in (("clean", population.x), ("shifted", x_adv)):
                logits = forward(module, params, x)
                loss = F.cross_entropy(logits, population.y, reduction="none")
                correct = logits.argmax(1) == population.y
                for c in range(self.params["clients"]):
                    rows = torch.as_tensor(population.group == c, device=x.device)
                    per_client[key].append((loss[rows], correct[rows]))
        out = shifted_metrics(per_client["clean"], per_client["shifted"], list(self.params["fractions"]), seed,
                              stream=stream)
        return {fraction_id(r["fraction"]): r["accuracy"] for r in out}
