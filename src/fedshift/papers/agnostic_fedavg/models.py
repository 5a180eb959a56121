"""Models of the AgnosticFedAvg experiments besides the language models (:mod:`fedshift.lm`).

* :class:`ToyRegression`: the toy regression of Ro et al. (2021), App. A: the prediction is a point
  w ∈ R^d, the loss of an example y is ‖w − y‖² (FedJAX ``fedjax/models/toy_regression.py`` uses the
  1-d (mean(y_batch) − w)²; spec §2.5 says to use the per-example loss with the current API).
* :class:`EmnistCNN`: the EMNIST CNN of Reddi et al. (2021) as in FedJAX ``fedjax/models/emnist.py``
  (spec §2.6): Conv 3×3×32 VALID → ReLU → Conv 3×3×64 VALID → ReLU → MaxPool 2×2 → Dropout 0.25 →
  Flatten → Dense 128 → ReLU → Dropout 0.5 → Dense 62. Dropout is active only in ``train()`` mode;
  the functional training here runs it in ``eval()`` mode (deterministic local steps) [ours].
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["ToyRegression", "EmnistCNN", "squared_loss"]


class ToyRegression(nn.Module):
    """The prediction w ∈ R^d, whatever the input.

    Parameters
    ----------
    dim : int
        d.
    init : sequence of float, optional
        w_0 (``reset_parameters`` restores it); zeros when None.
    """

    def __init__(self, dim: int, init: Sequence[float] | None = None) -> None:
        super().__init__()
        if init is not None and len(init) != dim:
            raise ValueError(f"init must have {dim} entries, got {len(init)}")
        self._init = torch.tensor(list(init) if init is not None else [0.0] * dim, dtype=torch.float32)
        self.w = nn.Parameter(self._init.clone())

    def reset_parameters(self) -> None:  # noqa: D102
        with torch.no_grad():
            self.w.copy_(self._init)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The prediction for every example: w repeated, shape (n, d)."""
        return self.w.unsqueeze(0).expand(x.shape[0], -1)


def squared_loss(module: nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """‖f(x) − y‖² per example, shape (n,) (the toy regression's loss)."""
    pred = torch.func.functional_call(module, params, (x,))
    return (pred - y).pow(2).sum(-1)


class EmnistCNN(nn.Module):
    """Reddi et al. (2021) / FedJAX EMNIST CNN on 28 × 28 × 1 inputs, 62 classes (see module docstring).

    Inputs (n, 1, 28, 28) or (n, 28, 28); logits (n, num_classes).
    """

    def __init__(self, num_classes: int = 62) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.drop1 = nn.Dropout(0.25)
        self.fc1 = nn.Linear(12 * 12 * 64, 128)
        self.drop2 = nn.Dropout(0.5)
        self.fc2 = nn.Linear(128, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        if x.ndim == 3:
            x = x.unsqueeze(1)
        h = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        h = self.drop1(torch.max_pool2d(h, 2)).flatten(1)
        return self.fc2(self.drop2(torch.relu(self.fc1(h))))
