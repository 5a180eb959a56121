"""The recipes' proofs: a toy dataset (tests/toy_dataset) and a toy shift (tests/toy_shift), each its own folder plus
one registration line, run end to end through the shift matrix: decoded from raw files, drawn, trained, evaluated.

The toy paper and the toy algorithm have their own end-to-end tests (test_contract_workflow.py, test_registry.py).
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from fedshift import plugins
from fedshift.config import validate_section
from fedshift.errors import ConfigError, load_yaml
from fedshift.data import registry as data_registry
from fedshift.data.prepare import prepare_dataset
from fedshift.shifts import SHIFTS
from fedshift.shifts import load_plugins as load_shift_plugins

ROOT = Path(__file__).resolve().parents[2]
TOY_DATASET = str(ROOT / "tests/toy_dataset/dataset.py")
TOY_SHIFT = str(ROOT / "tests/toy_shift/shift.py")
SCHEMA = ROOT / "src/fedshift/papers/shift_matrix/schema.yaml"
SIZES = {"clients": 4, "samples_per_client": 60, "validation_size": 80, "test_size": 200}
SECTION = {"outputs": [], "algorithms": ["fedavg"], "baseline": "fedavg", "seeds": 2, "model": "logreg",
           "grid_size": 1, "grids": {"default": [{"client_lr": 0.5}]},
           "train": {"rounds": 15, "clients_per_round": 4, "local_epochs": 1, "batch_size": 20, "client_lr": 0.5},
           "shifts": {"upright": {"kind": "none", "dataset": "toy_shapes", "split": "iid", **SIZES},
                      "rotated": {"kind": "toy_rotation", "dataset": "toy_shapes", "degrees": 90, **SIZES}}}


@pytest.fixture()
def toys():
    """Both plug-ins loaded as the workflow loads ``dataset_plugins`` and ``shift_plugins``, unloaded after."""
    yield data_registry.load_plugins([TOY_DATASET]), load_shift_plugins([TOY_SHIFT])
    assert plugins.unload(TOY_DATASET, data_registry.FACTS) == ("toy_shapes",)
    assert plugins.unload(TOY_SHIFT, SHIFTS) == ("toy_rotation",)


def _paper(section):
    from fedshift.papers.shift_matrix.paper import ShiftMatrixPaper

    validate_section(section, SCHEMA, "shift_matrix")
    p = ShiftMatrixPaper({"shift_matrix": copy.deepcopy(section), "shift_plugins": [TOY_SHIFT]})
    p.validate()
    return p


def test_each_registers_by_its_one_line(toys):
    datasets, shifts = toys
    assert list(datasets.values()) == [("toy_shapes",)] and list(shifts.values()) == [("toy_rotation",)]
    facts = data_registry.facts("toy_shapes")
    assert (facts.num_classes, facts.image_shape) == (4, (1, 12, 12))
    toy_yaml = load_yaml(ROOT / "tests/toy_dataset/toy_dataset.yaml")
    assert toy_yaml["dataset_plugins"] == ["tests/toy_dataset/dataset.py"]


def test_toy_dataset_and_toy_shift_run_a_matrix_cell_end_to_end(toys, tmp_path):
    prepared = tmp_path / "toy_shapes.pt"
    prepare_dataset("toy_shapes", ROOT / "tests/toy_dataset/raw", prepared)
    data = torch.load(prepared, weights_only=True)
    assert data["x_train"].shape == (400, 12, 12) and set(data["y_test"].tolist()) == {0, 1, 2, 3}
    p = _paper(SECTION)
    accuracy = {}
    for spec in (s for s in p.runs() if s.seed == 0):
        inputs = p.inputs(spec)
        assert inputs == {"toy_shapes": "data/prepared/toy_shapes.pt"}
        inputs = {"toy_shapes": str(prepared)}
        fit = p.train(spec, inputs, device=torch.device("cpu"), checkpoint=None, fingerprint="")
        torch.save(fit.artifacts, tmp_path / f"{spec.experiment}.pt")
        rows = p.evaluate(spec, inputs, {"artifacts": str(tmp_path / f"{spec.experiment}.pt")},
                          device=torch.device("cpu"))
        for role in ("validation", "test"):
            accuracy[spec.experiment, role] = float(rows[rows.role == role].value.iloc[0])
    # learnable upright; validation never shows the rotation, so it cannot warn of the drop the test sees
    assert accuracy["upright", "test"] > 0.8 and accuracy["rotated", "validation"] > 0.8
    assert accuracy["rotated", "test"] < accuracy["upright", "test"] - 0.2


def test_their_bad_config_is_refused_naming_the_key(toys):
    bad = copy.deepcopy(SECTION)
    bad["shifts"]["rotated"]["degrees"] = 45
    with pytest.raises(ConfigError, match=r"shift_matrix\.shifts\.rotated\.degrees: 45 is not one of"):
        _paper(bad)
    bad = copy.deepcopy(SECTION)
    bad["shifts"]["upright"]["dataset"] = "toy_shapez"
    with pytest.raises(ConfigError, match=r"shifts\.upright\.dataset: dataset .toy_shapez. is not a registered"):
        _paper(bad)


def test_without_their_plugins_the_names_are_unknown():
    from fedshift.papers.shift_matrix.paper import ShiftMatrixPaper

    assert "toy_shapes" not in data_registry.FACTS and "toy_rotation" not in SHIFTS
    with pytest.raises(ConfigError, match="toy_rotation"):
        ShiftMatrixPaper({"shift_matrix": copy.deepcopy(SECTION)}).validate()


def test_a_model_too_large_for_the_toy_images_is_refused_before_any_job_naming_the_model_and_shift(toys):
    """The toy's 12×12 images leave nothing after cnn2's two 5×5 convolutions and pools: refused by validation,
    naming the model key and the shift, instead of every cnn2 cell failing in its job."""
    assert _paper(SECTION).models == ["logreg"]
    both = copy.deepcopy(SECTION) | {"model": ["logreg", "cnn2"]}
    with pytest.raises(ConfigError, match=r"shift_matrix\.model\[1\]: model 'cnn2' needs images of at least 16 px "
                                          r"a side, but shift 'upright' .* reads 12×12 images"):
        _paper(both)
    alone = copy.deepcopy(SECTION) | {"model": "cnn2"}
    with pytest.raises(ConfigError, match=r"shift_matrix\.model: model 'cnn2'"):
        _paper(alone)
