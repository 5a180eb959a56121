"""Adversarial domain-adaptation networks and losses: the DANN, CDAN and MDD heads of FedMM.

Paper: Y. Shen, J. Du, H. Zhao, Z. Ji, C. Ma, M. Gao. *FedMM: A Communication Efficient Solver for
Federated Adversarial Domain Adaptation.* AAMAS 2023 (arXiv:2110.08477), §2.1 eqs. (2)–(3): every head
is the minimax problem

    min_ω max_ψ  f(ω, ψ) = L₁(ω) − ν L₂(ω, ψ),

with L₁ the cross-entropy of the task classifier on the labelled source rows and L₂ the adversary's loss.
The adversary ψ (``adversary.*`` parameters) *minimises* L₂ (ascent on f); the feature extractor and the
task classifier ω (every other parameter) minimise L₁ and *maximise* L₂ (descent on f). The three heads
(official code ``fedmm/FedMM``, ``model/adv_loss.py``; papers spec §4.3):

* **DANN** (Ganin and Lempitsky 2015): h_ψ(z) ∈ [0, 1] is the probability that the feature z comes from
  the target domain; L₂ is the binary cross-entropy of the domain labels (target 1, source 0), mean over
  all rows.
* **CDAN** (Long et al. 2018), multilinear conditioning: h_ψ sees the outer product softmax(c) ⊗ z
  flattened (C · D inputs), without stop-gradient or entropy weighting, as the official code.
* **MDD** (Zhang et al. 2019): the adversary is a second classifier c' of the task head's shape; with
  ŷ = argmax c (no gradient), L₂ is the mean over rows of CE(c', ŷ) on source rows and
  −log(1 + 10⁻⁵ − softmax(c')_ŷ) on target rows (official constant 1.00001; margin factor 1).

Networks: the digits feature extractor (text §4: three conv layers; the official ``toybase`` has two,
``conv_layers=2``), task and domain classifiers as fully connected nets with the hidden widths given (text:
two-layer, i.e. one hidden layer of 100; official toy task head 100-100), and the Office-31 network on a
torchvision MobileNetV2 (:func:`build_office_network`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from fedshift.core.base import Params
from fedshift.models import MaxPool2x2

__all__ = ["HEADS", "ADVERSARY", "DigitsFeatures", "AdaptationNet", "mlp", "is_adversary", "dann_loss",
           "cdan_input", "mdd_loss", "adversary_loss", "minimax_objective", "grad_reverse",
           "build_digits_network", "build_office_network"]

#: The adversarial heads.
HEADS = ("dann", "cdan", "mdd")
#: Prefix of the adversary's (domain classifier's) parameter names: ψ. Every other parameter is ω.
ADVERSARY = "adversary."
#: Offset of MDD's target term −log(1 + ε − p) (official ``adv_loss.py``: 1.00001).
MDD_EPS = 1e-5


def is_adversary(name: str) -> bool:
    """True for a parameter of ψ (the domain classifier / MDD's adversarial classifier)."""
    return name.startswith(ADVERSARY)


def mlp(in_dim: int, hidden: Sequence[int], out_dim: int, dropout: float = 0.0) -> nn.Sequential:
    """Fully connected net in → hidden… → out with ReLU (and dropout, if > 0) after every hidden layer."""
    layers: list[nn.Module] = []
    d = in_dim
    for h in hidden:
        layers += [nn.Linear(d, h), nn.ReLU()] + ([nn.Dropout(dropout)] if dropout > 0 else [])
        d = h
    layers.append(nn.Linear(d, out_dim))
    return nn.Sequential(*layers)


class DigitsFeatures(nn.Module):
    """Convolutional feature extractor for 28 x 28 x 3 digits.

    ``conv_layers=2`` is the official ``toybase`` (``model/backbone.py``): conv 5x5x32 → ReLU → max-pool 2 →
    conv 5x5x48 → ReLU → max-pool 2, 7·7·48 = 2,352 features. ``conv_layers=3`` (the text, §4: "a
    three-layer convolutional network") adds conv 3x3x64 → ReLU → max-pool 2 (3·3·64 = 576 features)
    [ours: the paper gives no widths for the third layer].

    Raises
    ------
    ValueError
        For ``conv_layers`` other than 2 or 3.
    """

    def __init__(self, conv_layers: int = 3, in_channels: int = 3) -> None:
        super().__init__()
        if conv_layers not in (2, 3):
            raise ValueError(f"conv_layers must be 2 or 3, got {conv_layers}")
        # MaxPool2x2: nn.MaxPool2d(2) by the faster channels-last CPU kernel, the same values and gradients
        layers: list[nn.Module] = [nn.Conv2d(in_channels, 32, 5, padding=2), nn.ReLU(), MaxPool2x2(),
                                   nn.Conv2d(32, 48, 5, padding=2), nn.ReLU(), MaxPool2x2()]
        self.out_dim = 48 * 7 * 7
        if conv_layers == 3:
            layers += [nn.Conv2d(48, 64, 3, padding=1), nn.ReLU(), MaxPool2x2()]
            self.out_dim = 64 * 3 * 3
        self.net = nn.Sequential(*layers, nn.Flatten())

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.net(x)


class AdaptationNet(nn.Module):
    """Feature extractor ζ¹ (``features``), task classifier ζ² (``classifier``) and adversary h_ψ (``adversary``).

    ``forward(x)`` returns the class logits (the model that is evaluated); :meth:`parts` returns the features,
    the class logits and the adversary's output, which is what the losses need.

    Parameters
    ----------
    features : nn.Module
        ζ¹, mapping inputs to (n, feature_dim).
    feature_dim : int
        D.
    num_classes : int
        C.
    head : {"dann", "cdan", "mdd"}
        Adversary: domain classifier on z (DANN, one logit), on softmax(c) ⊗ z (CDAN, one logit), or a second
        classifier of the task head's shape (MDD, C logits).
    task_hidden, domain_hidden : sequence of int
        Hidden widths of the task classifier and of the DANN/CDAN domain classifier.
    bottleneck : nn.Module, optional
        Applied to the features before both heads (Office-31 network); its output width is ``feature_dim``.
    dropout : float
        Dropout after the hidden layers of the classifiers (0 for the digits networks).
    freeze_batchnorm : bool
        Keep the feature extractor's batch-norm layers in eval mode (running statistics, never updated).

    Raises
    ------
    ValueError
        For an unknown head.
    """

    def __init__(self, features: nn.Module, feature_dim: int, num_classes: int, head: str,
                 task_hidden: Sequence[int] = (100,), domain_hidden: Sequence[int] = (100,),
                 bottleneck: nn.Module | None = None, dropout: float = 0.0, freeze_batchnorm: bool = False
                 ) -> None:
        super().__init__()
        if head not in HEADS:
            raise ValueError(f"unknown head {head!r}; known: {HEADS}")
        self.head, self.num_classes = head, num_classes
        self.freeze_batchnorm = freeze_batchnorm
        self.features = features
        self.bottleneck = bottleneck if bottleneck is not None else nn.Identity()
        self.classifier = mlp(feature_dim, task_hidden, num_classes, dropout)
        if head == "mdd":
            self.adversary = mlp(feature_dim, task_hidden, num_classes, dropout)
        else:
            in_dim = feature_dim * num_classes if head == "cdan" else feature_dim
            self.adversary = mlp(in_dim, domain_hidden, 1, dropout)

    def parts(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Features z (n, D), class logits c (n, C) and adversary output: (n,) domain logit or (n, C) logits."""
        z = self.bottleneck(self.features(x))
        c = self.classifier(z)
        if self.head == "mdd":
            return z, c, self.adversary(z)
        a = self.adversary(cdan_input(z, c) if self.head == "cdan" else z)
        return z, c, a.squeeze(-1)

    def forward(self, x: torch.Tensor, parts: bool = False):
        """Class logits (n, C); with ``parts=True`` the tuple of :meth:`parts` (for ``functional_call``)."""
        if parts:
            return self.parts(x)
        return self.classifier(self.bottleneck(self.features(x)))

    def train(self, mode: bool = True) -> AdaptationNet:
        """Set the training mode; batch-norm layers of the feature extractor stay in eval mode when frozen."""
        super().train(mode)
        if self.freeze_batchnorm:
            for m in self.features.modules():
                if isinstance(m, nn.modules.batchnorm._BatchNorm):
                    m.eval()
        return self


def cdan_input(z: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """CDAN's multilinear map: flatten(softmax(c) ⊗ z), shape (n, C · D); row i is [p_i1 z_i, …, p_iC z_i]."""
    return (torch.softmax(logits, dim=1).unsqueeze(2) * z.unsqueeze(1)).flatten(1)


def dann_loss(domain_logit: torch.Tensor, is_target: torch.Tensor) -> torch.Tensor:
    """L₂ of DANN and CDAN: mean binary cross-entropy of h_ψ = σ(logit) against target = 1, source = 0.

    Equals the mean over rows of −[t log h + (1 − t) log(1 − h)], i.e. −(D_Q or D_P) of eq. (3).

    Parameters
    ----------
    domain_logit : Tensor, shape (n,)
    is_target : Tensor of bool, shape (n,)
    """
    return F.binary_cross_entropy_with_logits(domain_logit, is_target.to(domain_logit.dtype))


def mdd_loss(adv_logits: torch.Tensor, task_logits: torch.Tensor, is_target: torch.Tensor) -> torch.Tensor:
    """L₂ of MDD (official ``adv_loss.py``): mean over rows of CE(c', ŷ) (source) or −log(1 + ε − p'_ŷ) (target).

    Parameters
    ----------
    adv_logits : Tensor, shape (n, C)
        The adversarial classifier c'.
    task_logits : Tensor, shape (n, C)
        The task classifier c; ŷ = argmax c, without gradient.
    is_target : Tensor of bool, shape (n,)
    """
    y_hat = task_logits.detach().argmax(1)
    logp = torch.log_softmax(adv_logits, dim=1).gather(1, y_hat[:, None]).squeeze(1)
    tgt = -torch.log(1.0 + MDD_EPS - logp.exp())
    return torch.where(is_target, tgt, -logp).mean()


def adversary_loss(head: str, task_logits: torch.Tensor, adv_out: torch.Tensor, is_target: torch.Tensor
                   ) -> torch.Tensor:
    """L₂ of ``head`` from the outputs of :meth:`AdaptationNet.parts`."""
    if head == "mdd":
        return mdd_loss(adv_out, task_logits, is_target)
    return dann_loss(adv_out, is_target)


def minimax_objective(module: AdaptationNet, params: Params, x: torch.Tensor, y: torch.Tensor,
                      is_target: torch.Tensor, nu: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """f(ω, ψ) = L₁ − ν L₂ on one mini-batch (eqs. 2–3), with L₁ and L₂.

    Parameters
    ----------
    module : AdaptationNet
    params : dict[str, Tensor]
        ω and ψ.
    x : Tensor, shape (n, ...)
        Source and target rows of one client's batch.
    y : Tensor, shape (n,), int64
        Labels of the source rows (target rows are ignored; any value).
    is_target : Tensor of bool, shape (n,)
    nu : float
        ν ≥ 0, the trade-off (official ``coef``: 1.0 DANN/CDAN, 0.5 MDD on digits).

    Returns
    -------
    f, L₁, L₂ : Tensor (scalars)
        L₁ is the mean cross-entropy over the source rows (0 when the batch has none).
    """
    _, c, a = torch.func.functional_call(module, params, (x,), {"parts": True})
    src = ~is_target
    l1 = F.cross_entropy(c[src], y[src]) if bool(src.any()) else c.sum() * 0.0
    l2 = adversary_loss(module.head, c, a, is_target)
    return l1 - nu * l2, l1, l2


class _GradReverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, coeff):  # noqa: D102
        ctx.coeff = coeff
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        return -ctx.coeff * grad, None


def grad_reverse(x: torch.Tensor, coeff: float = 1.0) -> torch.Tensor:
    """Gradient-reversal layer (Ganin and Lempitsky 2015): identity forward, gradient × (−coeff) backward.

    Descending ``L₁ + ν L₂(h_ψ(grad_reverse(z)))`` on all parameters moves ω along −∇_ω(L₁ − ν L₂) and ψ along
    −ν ∇_ψ L₂: the same direction as one SGDA step on f = L₁ − ν L₂ (descent on ω, ascent on ψ).
    """
    return _GradReverse.apply(x, coeff)


def build_digits_network(head: str, *, conv_layers: int = 3, task_hidden: Sequence[int] = (100,),
                         domain_hidden: Sequence[int] = (100,), num_classes: int = 10) -> AdaptationNet:
    """The MNIST → MNIST-M network: :class:`DigitsFeatures` and fully connected heads (papers spec §4.3–4.4)."""
    feats = DigitsFeatures(conv_layers)
    return AdaptationNet(feats, feats.out_dim, num_classes, head, task_hidden, domain_hidden)


def build_office_network(head: str, *, num_classes: int = 31, bottleneck_dim: int = 1024,
                         task_hidden: Sequence[int] = (1024,), domain_hidden: Sequence[int] = (1024,),
                         dropout: float = 0.5, weights_path: str | None = None) -> AdaptationNet:
    """The Office-31 network: torchvision MobileNetV2 features (ImageNet weights) and two-layer heads.

    Feature extractor: ``torchvision.models.mobilenet_v2().features`` → global average pool → 1,280 features,
    then a bottleneck Linear(1280 → ``bottleneck_dim``) → ReLU → Dropout (official ``medium`` bottleneck, whose
    batch norm is left out here); task classifier and domain classifier are two-layer nets with ``dropout``
    (official: 1024 hidden, keep 0.5). The backbone's batch-norm layers keep their ImageNet statistics
    (the model is always run with frozen running statistics; papers spec §4.3 says to decide explicitly).

    Parameters
    ----------
    weights_path : str, optional
        A torchvision MobileNetV2 state dict (``mobilenet_v2-b0353104.pth``, ImageNet-1k V1); None leaves
        the backbone randomly initialised (tests).

    Raises
    ------
    FileNotFoundError
        If ``weights_path`` does not exist.
    """
    from torchvision.models import mobilenet_v2

    net = mobilenet_v2(weights=None)
    if weights_path is not None:
        net.load_state_dict(torch.load(weights_path, map_location="cpu", weights_only=True))
    feats = nn.Sequential(net.features, nn.AdaptiveAvgPool2d(1), nn.Flatten())
    bottleneck = nn.Sequential(nn.Linear(1280, bottleneck_dim), nn.ReLU(), nn.Dropout(dropout))
    out = AdaptationNet(feats, bottleneck_dim, num_classes, head, task_hidden, domain_hidden, bottleneck, dropout,
                        freeze_batchnorm=True).train()
    out.pretrained_modules = ("features",) if weights_path is not None else ()  # init_params keeps them
    return out
