"""The model recipe's proof (tests/toy_model): registered by one line, built by name, initialised from the seed,
trained by a registered algorithm on the engine's batched and sequential paths to the same model."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from toy_federation import toy_clients

from fedshift.algorithms import registry
from fedshift.core.training import run_training
from fedshift.models import MODELS, build_model, init_params

TOY_MODEL = Path(__file__).resolve().parents[1] / "toy_model" / "model.py"


@pytest.fixture()
def toy_mlp():
    spec = importlib.util.spec_from_file_location("toy_model_fixture", TOY_MODEL)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    yield MODELS["toy_mlp"]
    del MODELS["toy_mlp"]


def _train(path: str, rounds: int = 6) -> tuple[dict[str, torch.Tensor], list[float]]:
    module = build_model("toy_mlp", input_dim=3, num_classes=3).double()
    params = init_params(module, seed=4, dtype=torch.float64)
    alg = registry.get("fedavg").build(module, clients_per_round=3, local_epochs=2, batch_size=8, client_lr=0.3,
                                       path=path)
    result = run_training(alg, params, toy_clients([30, 20, 25]), rounds=rounds, seed=0, log_every=1)
    return alg.eval_params(result.state), [row["loss"] for row in result.history]


def test_a_registered_model_is_built_by_name_and_initialised_from_the_seed(toy_mlp):
    module = build_model("toy_mlp", input_dim=3, num_classes=3, hidden=5)
    assert isinstance(module, toy_mlp) and module.hidden.out_features == 5
    a, b, c = (init_params(module, seed=s) for s in (1, 1, 2))
    assert all(torch.equal(a[k], b[k]) for k in a) and not torch.equal(a["hidden.weight"], c["hidden.weight"])
    with pytest.raises(ValueError, match="unknown model 'toy_mpl'"):
        build_model("toy_mpl", input_dim=3, num_classes=3)


def test_a_registered_model_trains_the_same_on_both_engine_paths(toy_mlp):
    batched, losses = _train("batched")
    sequential, _ = _train("sequential")
    assert batched.keys() == sequential.keys() == {"hidden.weight", "hidden.bias", "out.weight", "out.bias"}
    for k in batched:
        torch.testing.assert_close(batched[k], sequential[k], rtol=0, atol=1e-12)
    assert losses[-1] < losses[0]  # it learns
