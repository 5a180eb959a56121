"""A toy model from a test folder, the proof that a model is one class and one registration line (docs "Add a model").

A one-hidden-layer perceptron with sizes as keyword arguments; training is functional (the engine calls it through
``torch.func.functional_call`` over a parameter dict), so it keeps no state outside its parameters.
"""

from torch import nn

from fedshift.models import MODELS


class ToyMLP(nn.Module):
    """``input_dim`` → ``hidden`` (ReLU) → ``num_classes`` logits; inputs (n, ...) are flattened."""

    def __init__(self, input_dim: int, num_classes: int, hidden: int = 16) -> None:
        super().__init__()
        self.hidden = nn.Linear(input_dim, hidden)
        self.out = nn.Linear(hidden, num_classes)

    def forward(self, x):  # noqa: D102
        return self.out(self.hidden(x.flatten(1)).relu())


MODELS["toy_mlp"] = ToyMLP  # the registration line
