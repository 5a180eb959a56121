"""The benchmark's added methods (issue 36) in the shift matrix: a grid of their own knob, a cell in every shift of
the configured matrix for both models, and a short training in a cell from synthetic images."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import yaml
from test_shift_matrix import SECTION, SHAPES, SHIFTS, _fake, train_cell

from fedshift.algorithms import registry
from fedshift.papers.shift_matrix import cells
from fedshift.papers.shift_matrix.paper import ShiftMatrixPaper
from fedshift.shifts import shift_of

CONFIG = Path(__file__).resolve().parents[2] / "config" / "papers" / "shift_matrix.yaml"
#: Added method → its own knob's keys (FedNova has none: the default η grid; FedSR scales its two weights); every
#: grid also tunes the client step η (issue 50).
KNOBS = {"fedadam": {"server_lr"}, "fedyogi": {"server_lr"}, "fedadagrad": {"server_lr"}, "qffl": {"q"},
         "feddyn": {"alpha"}, "drfa": {"lambda_lr"}, "fednova": {"client_lr"}, "fedlc": {"tau"},
         "fedsr": {"l2r", "cmi"}}
#: One value of each knob, for the training test.
VALUES = {"fedadam": {"server_lr": 0.03}, "fedyogi": {"server_lr": 0.03}, "fedadagrad": {"server_lr": 0.1},
          "qffl": {"q": 1.0}, "feddyn": {"alpha": 0.1}, "drfa": {"lambda_lr": 0.003}, "fednova": {"client_lr": 0.1},
          "fedlc": {"tau": 1.0}, "fedsr": {"l2r": 0.01, "cmi": 0.0005}}


@pytest.fixture(scope="module")
def matrix() -> ShiftMatrixPaper:
    section = yaml.safe_load(CONFIG.read_text())["shift_matrix"]
    return ShiftMatrixPaper({"shift_matrix": section})


def test_every_added_method_is_a_row_with_a_full_grid_of_its_knob_and_a_cell_in_every_shift(matrix):
    matrix.validate()
    rows = matrix.algorithms()
    size = matrix.section["grid_size"]
    for name, knob in KNOBS.items():
        assert name in rows
        grid = matrix.grid(name)
        assert len(grid) == size and all(set(v) == knob | {"client_lr"} for v in grid)   # η × its knob (issue 50)
        assert len({tuple(sorted(v.items())) for v in grid}) == size      # distinct values, not one repeated
        assert name == "fednova" or name in matrix.section["grids"]         # its own grid, not the default's
        for shift in matrix.shifts.values():
            for model in ("logreg", "cnn2"):
                assert matrix.status(name, shift, model) is None, (name, shift.kind, model)


def test_fedbn_is_a_row_whose_cells_read_na_with_the_reason(matrix):
    assert "fedbn" in matrix.algorithms()
    for shift in matrix.shifts.values():
        for model in ("logreg", "cnn2"):
            status = matrix.status("fedbn", shift, model)
            assert status.startswith("n/a: it trains through its own loop (loop='own'") and "cell hook" in status


def test_a_side_information_method_still_reads_na_beside_them(matrix):
    """The n/a rule is untouched: FedPALS needs the target's label marginal, which the mixture shift lacks."""
    shift = next(s for s in matrix.shifts.values() if s.kind == "mixture")
    assert "target_label_marginal" in (matrix.status("fedpals", shift) or "")
    assert registry.get("drfa").needs == frozenset() and registry.get("qffl").needs == frozenset()


@pytest.mark.parametrize("name", sorted(KNOBS))
def test_each_added_method_trains_in_a_mixture_cell(name):
    data = {n: _fake(n) for n in SHAPES}
    inst = shift_of("mixture", SHIFTS["mixture"]).instance(data, 0)
    section = copy.deepcopy(SECTION)
    (params, history), = train_cell(name, inst, 0, model="logreg", train=section["train"], fixed={},
                                          grid=[VALUES[name]], device="cpu")
    from fedshift.models import init_params

    w0 = init_params(cells.model_of("logreg", 28, 10), 0)
    assert all(np.isfinite(v.numpy()).all() for v in params.values())
    assert not np.allclose(params["linear.weight"].numpy(), w0["linear.weight"].numpy())
    assert history and history[-1]["round"] == section["train"]["rounds"]
