"""Model building blocks: the pooling speed-up must not change a single value or gradient."""

import pytest
import torch
import torch.nn.functional as F

from fedshift.algorithms.domain_adaptation import DigitsFeatures
from fedshift.models import McMahanCNN, TwoLayerCNN, pool_relu


def _reference(x: torch.Tensor) -> torch.Tensor:
    return F.max_pool2d(torch.relu(x), 2)


@pytest.mark.parametrize("shape", [(4, 3, 8, 8), (2, 5, 9, 7), (1, 1, 2, 2)])
def test_pool_relu_equals_max_pool_of_relu_bit_for_bit(shape):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g)
    # Ties: a constant block (as background pixels give after a convolution) and repeated values.
    x[..., :2, :2] = 0.7
    x[0, 0, 2:4, 2:4] = -0.3
    a, b = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    out_new, out_ref = pool_relu(a), _reference(b)
    assert out_new.shape == out_ref.shape and out_new.is_contiguous()
    assert torch.equal(out_new, out_ref)
    w = torch.randn(out_ref.shape, generator=g)
    (out_new * w).sum().backward()
    (out_ref * w).sum().backward()
    assert torch.equal(a.grad, b.grad)
    # Exactly one input position per window receives the window's gradient, also on the tied block.
    assert int((a.grad[0, 0, :2, :2] != 0).sum()) <= 1


def test_pool_relu_under_vmap_and_func_grad_matches_reference():
    x = torch.randn(3, 2, 4, 6, 6, dtype=torch.float64)
    assert torch.equal(torch.vmap(pool_relu)(x), torch.vmap(_reference)(x))
    g_new = torch.func.grad(lambda t: torch.vmap(pool_relu)(t).pow(2).sum())(x)
    g_ref = torch.func.grad(lambda t: torch.vmap(_reference)(t).pow(2).sum())(x)
    assert torch.equal(g_new, g_ref)


@pytest.mark.parametrize("cls,size,channels", [(TwoLayerCNN, 28, 1), (McMahanCNN, 32, 3)])
def test_cnn_gradients_unchanged_by_the_pooling_path(cls, size, channels):
    torch.manual_seed(0)
    model = cls(num_classes=10, in_channels=channels, image_size=size)
    x = torch.randn(6, channels * size * size)
    x[:, : size * 4] = -1.0  # a constant top band, as Fashion-MNIST's background
    y = torch.arange(6) % 10
    params = list(model.parameters())

    def reference_forward(inp):
        h = inp.reshape(6, channels, size, size)
        h = _reference(model.conv1(h))
        h = _reference(model.conv2(h))
        h = h.flatten(1)
        if cls is McMahanCNN:
            return model.fc2(torch.relu(model.fc1(h)))
        return model.fc(h)

    g_new = torch.autograd.grad(F.cross_entropy(model(x), y), params)
    g_ref = torch.autograd.grad(F.cross_entropy(reference_forward(x), y), params)
    for a, b in zip(g_new, g_ref, strict=True):
        assert torch.equal(a, b)


def test_digits_extractor_with_maxpool2x2_matches_nn_maxpool2d():
    torch.manual_seed(0)
    net = DigitsFeatures(conv_layers=3)
    reference = torch.nn.Sequential(*[torch.nn.MaxPool2d(2) if type(m).__name__ == "MaxPool2x2" else m
                                      for m in net.net])
    x = torch.randn(4, 3, 28, 28)
    x[:, :, :8] = 0.0  # constant rows: tied windows
    out, ref = net(x), reference(x)
    assert torch.equal(out, ref)
    g_new = torch.autograd.grad(out.square().sum(), list(net.parameters()))
    g_ref = torch.autograd.grad(ref.square().sum(), list(reference.parameters()))
    for a, b in zip(g_new, g_ref, strict=True):
        assert torch.equal(a, b)
