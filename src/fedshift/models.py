"""Models as ``torch.nn.Module`` used functionally (parameters as a dict of tensors).

Algorithms never hold a module's own parameters: they call :func:`forward` with an explicit
parameter dict through :func:`torch.func.functional_call`, so parameters can be averaged,
checkpointed and, later, stacked along a client axis and vmapped.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

Params = dict[str, torch.Tensor]

__all__ = ["LogisticRegression", "McMahanCNN", "TwoLayerCNN", "MaxPool2x2", "max_pool2x2", "pool_relu",
           "MODELS", "build_model", "init_params", "forward", "logreg_grads"]


class LogisticRegression(nn.Module):
    """Multinomial logistic regression, ``logits = x W^T + b``.

    Parameters
    ----------
    input_dim : int
        Number of input features d (inputs of shape (n, d) or (n, *) flattened to (n, d)).
    num_classes : int
        Number of classes C; logits have shape (n, C).

    Notes
    -----
    The model of Mohri et al. (2019) §5 for Adult (99 → 2) and Fashion-MNIST (784 → 3).
    """

    def __init__(self, input_dim: int, num_classes: int) -> None:
        super().__init__()
        self.linear = nn.Linear(input_dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.linear(x.flatten(1))

    @staticmethod
    def closed_form_grads(params: Params, x: torch.Tensor, y: torch.Tensor,
                          ww: torch.Tensor) -> tuple[Params, torch.Tensor]:
        """The engine's hand-batched kernel for this model: :func:`logreg_grads` (same arguments, same returns).

        :func:`fedshift.core.engine.local_sgd` looks for this hook on the model's class, so the engine
        knows no model: a model with an exact closed-form gradient of its weighted cross-entropy provides
        it, and the engine runs one batched product per step for all clients instead of ``vmap(grad)``.
        """
        return logreg_grads(params, x, y, ww)


def logreg_grads(params: Params, x: torch.Tensor, y: torch.Tensor, ww: torch.Tensor) -> tuple[Params, torch.Tensor]:
    """Closed-form ∇ of Σ_i ww_i ℓ_i for :class:`LogisticRegression`, and the per-example losses ℓ_i.

    With z = x Wᵀ + b and ℓ = cross-entropy, ∂ℓ/∂z = softmax(z) − onehot(y), so the gradient is two
    matrix products. Leading dimensions are batch dimensions (clients or runs trained at once):
    one batched product per step for all of them, instead of ``vmap(grad)``'s per-op batching,
    which dominates the cost of this launch-bound model.

    Parameters
    ----------
    params : dict[str, Tensor]
        ``linear.weight`` (..., K, d) and ``linear.bias`` (..., K).
    x : Tensor, shape (..., n, d) or (..., n, *) (flattened to d features)
    y : Tensor, shape (..., n)
        Class labels (int64).
    ww : Tensor, shape (..., n)
        Example weights (e.g. 1/n for a mean, λ_k/b for Stochastic-AFL's PERDOMAIN estimate).

    Returns
    -------
    grads : dict[str, Tensor]
        Same shapes as ``params``.
    losses : Tensor, shape (..., n)
        Per-example cross-entropy in nats (no autograd history).
    """
    W, b = params["linear.weight"], params["linear.bias"]
    x = x.reshape(*x.shape[: W.ndim - 1], -1)
    logp = torch.log_softmax(x @ W.transpose(-1, -2) + b.unsqueeze(-2), dim=-1)
    losses = -logp.gather(-1, y.unsqueeze(-1)).squeeze(-1)
    g = logp.exp()
    g.scatter_add_(-1, y.unsqueeze(-1), -torch.ones_like(losses).unsqueeze(-1))
    g = g * ww.unsqueeze(-1)
    return {"linear.weight": g.transpose(-1, -2) @ x, "linear.bias": g.sum(-2)}, losses.detach()


MODELS: dict[str, Callable[..., nn.Module]] = {"logreg": LogisticRegression}


def build_model(name: str, **kwargs: int) -> nn.Module:
    """Instantiate a model by registry name.

    Raises
    ------
    ValueError
        For an unknown name (the message lists the known ones).
    """
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; known: {sorted(MODELS)}")
    return MODELS[name](**kwargs)


def init_params(
    module: nn.Module, seed: int, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
) -> Params:
    """Fresh parameters for ``module`` from PyTorch's default initialisers, seeded.

    Parameters
    ----------
    module : nn.Module
        The model (left unchanged: a CPU copy is initialised). Submodules named in its
        ``pretrained_modules`` attribute (if any) keep their loaded weights; the rest is re-initialised.
    seed : int
        Seed of the initialisation, drawn on the CPU whatever ``device`` is, so a seed gives the
        same w_0 on every device (the global CPU RNG is forked, not disturbed).
    dtype, device
        Of the returned tensors.

    Returns
    -------
    dict[str, Tensor]
        Detached copies of the parameters, keyed by ``named_parameters`` names.
    """
    import copy

    cpu = copy.deepcopy(module).to("cpu", torch.float32)
    keep = tuple(getattr(module, "pretrained_modules", ()))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for name, m in cpu.named_modules():
            if any(name == p or name.startswith(p + ".") for p in keep):
                continue
            if hasattr(m, "reset_parameters"):
                m.reset_parameters()
    return {k: v.detach().to(device=device, dtype=dtype).clone() for k, v in cpu.named_parameters()}


def forward(module: nn.Module, params: Params, x: torch.Tensor) -> torch.Tensor:
    """Apply ``module`` with the given parameters (``torch.func.functional_call``)."""
    return torch.func.functional_call(module, params, (x,))


class _MaxPool2x2ChannelsLast(torch.autograd.Function):
    """2×2 max pooling of an NCHW CPU tensor, run by the channels-last kernel (see :func:`max_pool2x2`)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        y, idx = torch.nn.functional.max_pool2d(x.contiguous(memory_format=torch.channels_last), 2,
                                                return_indices=True)
        ctx.save_for_backward(idx)
        ctx.input_shape = x.shape
        return y.contiguous()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # noqa: D102
        (idx,) = ctx.saved_tensors
        # Each window's gradient goes to its argmax position: exactly max_pool2d's backward (NCHW out).
        return torch.nn.functional.max_unpool2d(grad.contiguous(), idx.contiguous(), 2,
                                                output_size=ctx.input_shape[-2:]).contiguous()


def max_pool2x2(x: torch.Tensor) -> torch.Tensor:
    """2×2 max pooling (stride 2), equal to ``max_pool2d(x, 2)`` value for value and gradient for gradient.

    A speed-up with bit-identical results (``benchmarks/pooling.py``): on the CPU PyTorch's NCHW
    max-pooling kernel is several times slower than its channels-last one for the small batches of
    local training, so the pooling runs in channels-last layout and its backward scatters the gradient
    to the argmax positions in NCHW (the argmax is the one ``max_pool2d`` picks, ties included). Inside
    ``torch.func`` transforms (the vmapped client axis), which cannot query memory formats, and on other
    devices it is plain ``max_pool2d``. Not twice differentiable on the CPU path.

    Parameters
    ----------
    x : Tensor
        Shape (n, c, h, w), float.

    Returns
    -------
    Tensor
        Shape (n, c, h // 2, w // 2), contiguous.
    """
    if x.device.type == "cpu" and x.dim() == 4 and torch._C._functorch.maybe_current_level() is None:
        return _MaxPool2x2ChannelsLast.apply(x)
    return torch.nn.functional.max_pool2d(x, 2)


class MaxPool2x2(nn.Module):
    """:func:`max_pool2x2` as a layer (a drop-in for ``nn.MaxPool2d(2)``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return max_pool2x2(x)


def pool_relu(x: torch.Tensor) -> torch.Tensor:
    """ReLU(:func:`max_pool2x2` (x)): MaxPool(ReLU(x)) exactly, with a quarter of the ReLU's work.

    Maps (n, c, h, w) to (n, c, h // 2, w // 2), like :func:`max_pool2x2`.
    """
    return torch.relu(max_pool2x2(x))


class McMahanCNN(nn.Module):
    """The CNN of McMahan et al. (2017), §3 (the MNIST CNN).

    "Communication-Efficient Learning of Deep Networks from Decentralized Data": Conv(1→32, 5×5) –
    ReLU – MaxPool 2 – Conv(32→64, 5×5) – ReLU – MaxPool 2 – Linear(1024→512) – ReLU – Linear(512→C),
    no padding, 28×28 inputs.

    Parameters
    ----------
    num_classes : int
        C.
    in_channels : int
        Input channels (1 for MNIST / Fashion-MNIST, 3 for CIFAR-10).
    image_size : int
        Side of the square input (28; 32 for CIFAR-10, where fc1 takes 64·5·5 = 1600 features).

    Notes
    -----
    Inputs of shape (n, in_channels·image_size²) or (n, in_channels, image_size, image_size); logits of
    shape (n, C).
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 1, image_size: int = 28) -> None:
        super().__init__()
        self.in_channels, self.image_size = in_channels, image_size
        side = ((image_size - 4) // 2 - 4) // 2
        if side < 1:
            raise ValueError(f"image_size {image_size} is too small for two 5x5 convolutions and pools")
        self.conv1 = nn.Conv2d(in_channels, 32, 5)
        self.conv2 = nn.Conv2d(32, 64, 5)
        self.fc1 = nn.Linear(64 * side * side, 512)
        self.fc2 = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = x.reshape(x.shape[0], self.in_channels, self.image_size, self.image_size)
        x = pool_relu(self.conv1(x))
        x = pool_relu(self.conv2(x))
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


MODELS["cnn_mcmahan"] = McMahanCNN


class TwoLayerCNN(nn.Module):
    """A small two-layer CNN for 28×28 or 32×32 images (FedPALS, Listo Zec et al. 2024, §5).

    The paper uses "small, two-layer convolutional networks" for Fashion-MNIST and CIFAR-10 without
    further detail; this one is Conv(c→16, 5×5) – ReLU – MaxPool 2 – Conv(16→32, 5×5) – ReLU –
    MaxPool 2 – Linear(32·s²→K), no padding (s = 4 for 28×28 inputs, 5 for 32×32).

    Parameters
    ----------
    num_classes : int
        K.
    in_channels : int
        1 (Fashion-MNIST) or 3 (CIFAR-10).
    image_size : int
        28 or 32 (square inputs).

    Notes
    -----
    Inputs of shape (n, c·s²) or (n, c, s, s), float; logits of shape (n, K).
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 1, image_size: int = 28) -> None:
        super().__init__()
        self.in_channels, self.image_size = in_channels, image_size
        side = ((image_size - 4) // 2 - 4) // 2
        self.conv1 = nn.Conv2d(in_channels, 16, 5)
        self.conv2 = nn.Conv2d(16, 32, 5)
        self.fc = nn.Linear(32 * side * side, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = x.reshape(x.shape[0], self.in_channels, self.image_size, self.image_size)
        x = pool_relu(self.conv1(x))
        x = pool_relu(self.conv2(x))
        return self.fc(x.flatten(1))


MODELS["cnn2"] = TwoLayerCNN


class ResNet50FrozenBN(nn.Module):
    """ResNet-50 featuriser and linear classifier with frozen batch norm (Bai et al. 2024).

    The federated domain-generalisation benchmark's model (``inouye-lab/FedDG_Benchmark``,
    ``src/models.py``; spec §5.6), which FedPALS uses for PACS and iWildCam (§5.1): torchvision's
    ResNet-50 with its ImageNet weights, the final ``fc`` replaced by Linear(2048 → 2048) (the
    featuriser's output), then Linear(2048 → K). Every BatchNorm2d stays in eval mode, also during
    training: its running statistics are the ImageNet ones and are never updated (its affine weights
    are trained).

    Parameters
    ----------
    num_classes : int
        K; logits have shape (n, K) for inputs (n, 3, H, W) (ImageNet-normalised, any H, W ≥ 32).
    weights_path : str, optional
        torchvision's ``resnet50-0676ba61.pth`` (IMAGENET1K_V1, the weights ``pretrained=True``
        loads); its ``fc`` entries are dropped. None: random initialisation (tests).

    Attributes
    ----------
    pretrained_modules : tuple of str
        Submodules whose loaded weights :func:`init_params` keeps (``("backbone",)`` when pretrained).

    Raises
    ------
    RuntimeError
        If the weights file does not match ResNet-50's layers.
    """

    def __init__(self, num_classes: int, weights_path: str | None = None) -> None:
        super().__init__()
        from torchvision.models import resnet50

        self.backbone = resnet50(weights=None)
        self.backbone.fc = nn.Identity()
        if weights_path:
            state = torch.load(weights_path, map_location="cpu", weights_only=True)
            self.backbone.load_state_dict({k: v for k, v in state.items() if not k.startswith("fc.")})
        self.pretrained_modules = ("backbone",) if weights_path else ()
        self.projection = nn.Linear(2048, 2048)
        self.classifier = nn.Linear(2048, num_classes)
        self.train()

    def train(self, mode: bool = True) -> ResNet50FrozenBN:  # noqa: D102
        super().train(mode)
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.eval()
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.classifier(self.projection(self.backbone(x)))


MODELS["resnet50"] = ResNet50FrozenBN
