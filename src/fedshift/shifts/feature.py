"""Feature shift: every client sees one dataset through its own fixed transformation (FedBN's setting).

One dataset (e.g. MNIST) is split i.i.d. over M clients; client i's images are rotated by its own angle θ_i, drawn
once per seed uniformly from [−``max_angle``, ``max_angle``] degrees (FedBN, Li et al. 2021, studies feature shift
across clients; rotation is the transformation here [ours], applied bilinearly on the image grid (28 × 28 for
MNIST) with zero padding, :func:`rotate`). Two test populations in one: the clients' own distributions (each
client's held-out test rows at θ_i, ``test_per_client`` per client) and an unseen transformation (``test_size``
rows at ``test_angle``, outside the clients' range). The validation population is drawn like it from held-out
training rows: each client's rows at θ_i and rows at a *different* unseen angle ``validation_angle``, so no test
transformation is ever used to tune. Metrics: ``unseen_accuracy`` (primary) and ``own_accuracy`` (the mean over
clients of the accuracy on their own transformation). No side information.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from fedshift.shifts import (
    Instance,
    Partition,
    Population,
    Segment,
    Shift,
    accuracy_by_group,
    demand_problems,
    register_shift,
    split_rows,
)

if TYPE_CHECKING:  # the plan imports no torch (fedshift.shifts); the tensor code imports it where it runs
    import torch

#: Stream of this shift's draws within a seed.
STREAM = 70


def rotate(x: torch.Tensor, degrees: float) -> torch.Tensor:
    """Square images (n, s²) rotated by ``degrees`` about their centre (bilinear, zero padding).

    Counter-clockwise as displayed: at 90° it is ``np.rot90`` of each s × s image.

    Returns
    -------
    Tensor, shape (n, s²)
        Same dtype and device.
    """
    import torch
    import torch.nn.functional as F

    if degrees == 0 or len(x) == 0:
        return x.clone()
    a = math.radians(degrees)
    theta = torch.tensor([[math.cos(a), -math.sin(a), 0.0], [math.sin(a), math.cos(a), 0.0]], dtype=x.dtype,
                         device=x.device).expand(len(x), 2, 3)
    side = math.isqrt(x.shape[1])
    img = x.reshape(len(x), 1, side, side)
    grid = F.affine_grid(theta, list(img.shape), align_corners=False)
    return F.grid_sample(img, grid, mode="bilinear", padding_mode="zeros", align_corners=False).flatten(1)


@register_shift
class FeatureShift(Shift):
    """Clients under their own rotations; own and unseen transformations at test (module docstring)."""

    kind = "feature"

    @classmethod
    def protocol(cls, params: Mapping[str, Any], sizes: Callable[[str, str], int | None]) -> list[tuple[str, str]]:
        """Both unseen angles outside the clients' range [−max_angle, max_angle] (as directions: modulo 360°), the
        validation angle not the test angle (no tuning on the test transformation), max_angle < 180° (a wider range
        holds every direction), and every draw within its split (:meth:`Shift.protocol`)."""
        p, out = params, []
        lim = p["max_angle"]
        if lim >= 180:
            out.append(("max_angle", f"{lim}° covers every direction: no angle is unseen (max_angle < 180)"))
        for key in ("validation_angle", "test_angle"):
            a = (p[key] + 180) % 360 - 180  # the direction in [−180, 180)
            if abs(a) <= lim:
                out.append((key, f"{p[key]}° is not outside the clients' range [-{lim}, {lim}]°: it is not unseen"))
        if (p["validation_angle"] - p["test_angle"]) % 360 == 0:
            out.append(("validation_angle", f"{p['validation_angle']}° is the test angle: the method would be tuned "
                                            "on the test transformation"))
        m, d = p["clients"], p["dataset"]
        return out + demand_problems([
            ("clients", d, "train", m * (p["samples_per_client"] + p["validation_per_client"]) + p["validation_size"]),
            ("test_size", d, "test", m * p["test_per_client"] + p["test_size"])], sizes)

    def partition(self, data: Mapping[str, Mapping[str, Any]], seed: int) -> Partition:
        """Client rows, per-client validation and test rows (group i), unseen-angle rows (group M); the angles.

        Raises
        ------
        ValueError
            For a violated :meth:`protocol` condition (an unseen angle within [−max_angle, max_angle], ...).
        """
        p, d = self.params, self.params["dataset"]
        lim = p["max_angle"]
        self.check_protocol(data)
        rng = np.random.default_rng([seed, STREAM])
        m = p["clients"]
        angles = rng.uniform(-lim, lim, size=m).round(6).tolist()
        parts = split_rows(rng, np.arange(len(data[d]["y_train"])),
                           [p["samples_per_client"]] * m + [p["validation_per_client"]] * m + [p["validation_size"]])
        tests = split_rows(rng, np.arange(len(data[d]["y_test"])), [p["test_per_client"]] * m + [p["test_size"]])
        return Partition([Segment(d, "train", c, i) for i, c in enumerate(parts[:m])],
                         [Segment(d, "train", v, i) for i, v in enumerate(parts[m:])],
                         [Segment(d, "test", t, i) for i, t in enumerate(tests)],
                         info={"angles": angles, "validation_angle": p["validation_angle"],
                               "test_angle": p["test_angle"]})

    def populations(self, data: Mapping[str, Mapping[str, Any]], partition: Partition, device: Any = "cpu"
                    ) -> dict[str, Population]:
        """Validation and test rows, group i rotated by θ_i and group M by the role's unseen angle."""
        import torch

        out = super().populations(data, partition, device)
        m = len(partition.clients)
        for role, pop in out.items():
            angles = partition.info["angles"] + [partition.info[f"{role}_angle"]]
            x = pop.x.clone()
            for g in range(m + 1):
                rows = torch.as_tensor(np.nonzero(pop.group == g)[0], device=x.device)
                x[rows] = rotate(x[rows], angles[g])
            out[role] = Population(x, pop.y, pop.group)
        return out

    def instance(self, data: Mapping[str, Mapping[str, Any]], seed: int, device: Any = "cpu") -> Instance:
        """The contract's instance with client i's inputs rotated by θ_i."""
        from fedshift.core.base import ClientData

        inst = super().instance(data, seed, device)
        angles = inst.partition.info["angles"]
        clients = [ClientData(c.client_id, rotate(c.x, angles[i]), c.y, c.domain) for i, c in enumerate(inst.clients)]
        return replace(inst, clients=clients)

    def metrics(self) -> list[str]:
        """Accuracy at the unseen angle (primary), mean accuracy of the clients on their own angles."""
        return ["unseen_accuracy", "own_accuracy"]

    def metric(self, module: torch.nn.Module, params: dict[str, torch.Tensor], population: Population, *,
               role: str, seed: int) -> dict[str, float]:
        """Accuracy of group M (the unseen angle) and the mean over the clients' groups 0..M−1."""
        import torch

        from fedshift.models import forward

        with torch.no_grad():
            correct = forward(module, params, population.x).argmax(1) == population.y
        acc = accuracy_by_group(correct, population.group)
        unseen = max(acc)
        return {"unseen_accuracy": acc[unseen], "own_accuracy": float(np.mean([acc[g] for g in acc if g != unseen]))}
