"""The shift matrix's cost columns (costs.cell_costs, per_method; tuning_table.tuning; the table's csv): one
training run's CPU-seconds from the tuning's measured seconds per round trained, and the bytes a round sends per
sampled client from the trained network's parameter count and the arrays its declaration says it sends (here
declared by the test: the matrix reads ``payload`` off the declaration and holds none itself)."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from fedshift.algorithms import fedsr, sgda
from fedshift.papers.shift_matrix import cells, costs, report, rows, tuning_table


def _numel(net: torch.nn.Module) -> int:
    return sum(p.numel() for p in net.parameters())


@pytest.mark.parametrize(("side", "k"), [(28, 10), (32, 3)])
def test_parameter_counts_match_the_networks_the_cells_train(side, k):
    """The torch-free counts against the networks themselves: the matrix's model (cells.model_of), the DANN
    network of the CNN (sgda.dann_network) and FedSR's (fedsr.FedSRNet at the factory's default z)."""
    for model in ("logreg", "cnn2"):
        module = cells.model_of(model, side, k)
        assert costs.network_parameters("model", model, side, k) == _numel(module)
        net = fedsr.FedSRNet(module, costs.REPRESENTATION_Z_DIM)
        assert costs.network_parameters("representation", model, side, k) == _numel(net)
    cnn = cells.model_of("cnn2", side, k)
    assert costs.network_parameters("discriminator", "cnn2", side, k) == _numel(sgda.dann_network(cnn)[0])
    assert costs.DOMAIN_HIDDEN == sgda.DOMAIN_HIDDEN
    assert inspect.signature(fedsr.build_fedsr).parameters["z_dim"].default == costs.REPRESENTATION_Z_DIM
    with pytest.raises(ValueError, match="no 'discriminator' network on model 'logreg'"):
        costs.network_parameters("discriminator", "logreg", side, k)


#: What the test declares: FedAvg one model each way, SCAFFOLD two (x and c down, Δy_i and Δc_i up), a DANN-family
#: method and a stochastic-representation one on their own networks; "bare" declares nothing.
DECLARED = {"fedavg": costs.Payload(1, 1), "scaffold": {"down": 2, "up": 2, "network": "model"},
            "fedmm": costs.Payload(1, 1, "discriminator"), "fedsr": costs.Payload(1, 1, "representation"),
            "bare": None}


@pytest.fixture
def declared(monkeypatch):
    monkeypatch.setattr(rows, "declaration", lambda name: SimpleNamespace(payload=DECLARED[name]) if name in DECLARED
                        else (_ for _ in ()).throw(KeyError(name)))


def test_the_payload_is_read_off_the_declaration_and_none_where_it_declares_none(declared):
    assert costs.payload("scaffold") == costs.Payload(2, 2, "model")                  # a mapping is read too
    assert costs.payload("bare") is None and costs.payload("unregistered") is None
    with pytest.raises(ValueError, match="network must be one of"):                # the declaration refuses it
        costs.Payload(1, 1, "hypernetwork")
    DECLARED["odd"] = {"down": 1, "up": 1, "network": "hypernetwork"}              # a mapping gets past it
    try:
        with pytest.raises(ValueError, match="'odd' declares a payload on network 'hypernetwork'"):
            costs.payload("odd")
    finally:
        del DECLARED["odd"]


def test_no_registered_algorithm_declares_a_payload_the_matrix_cannot_read():
    from fedshift.algorithms import registry

    got = {name: costs.payload(name) for name in registry.declared_names()}     # None or a known network
    assert got["fedavg"] == costs.Payload(1, 1) and got["scaffold"] == costs.Payload(2, 2)
    assert got["drfa"] == costs.Payload(2, 2) and got["fedsr"].network == "representation"
    assert {n for n, p in got.items() if p is not None and p.network == "discriminator"} == {
        "fedmm", "fedavg_sgda", "fedprox_sgda", "fedsgda"}
    assert got["afl"] is None                            # S data-dependent steps: no fixed count of arrays


def _metrics() -> pd.DataFrame:
    """Two cells of two seeds each: successive halving's rounds (9 values: 6 to 2 rounds, 2 to 6, 1 to 18)."""
    rows = []
    for alg, cpu in (("fedavg", [13.0, 15.6]), ("scaffold", [26.0, 31.2])):
        for seed, seconds in enumerate(cpu):
            for g, rounds in enumerate([2] * 6 + [6] * 2 + [18]):
                for role in ("validation", "test"):
                    rows.append({"shift": "s", "algorithm": alg, "seed": seed, "grid": g, "rounds": rounds,
                                 "role": role, "metric": "accuracy", "value": 0.5 + 0.01 * g})
            rows.append({"shift": "s", "algorithm": alg, "seed": seed, "grid": -1, "rounds": 0, "role": "tuning",
                         "metric": "cpu_seconds", "value": seconds})
    return pd.DataFrame(rows)


PARAMS = {"columns": [{"shift": "s", "metric": "accuracy", "label": "s: accuracy"}], "baseline": "fedavg",
          "algorithms": ["fedavg", "scaffold", "afl", "bare"], "na": {"afl": {"s": "n/a: no domains"}}, "model": "cnn2",
          "chance": {"s": 0.1}, "image_side": {"s": 28}, "grids": {"fedavg": [{"client_lr": 0.1}] * 9,
                                                                   "scaffold": [{"client_lr": 0.1}] * 9}}


def test_training_seconds_and_bytes_per_round_by_hand(declared):
    cell = costs.cell_costs(_metrics(), PARAMS).set_index("algorithm")
    assert "afl" not in cell.index                                               # its cell is n/a
    # per seed: cpu / (6·2 + 2·6 + 18 = 42 rounds trained) · 18; fedavg: 13/42·18 + 15.6/42·18
    assert cell.loc["fedavg", "training_cpu_seconds"] == pytest.approx((13.0 + 15.6) * 18 / 42)
    assert cell.loc["scaffold", "training_cpu_seconds"] == pytest.approx((26.0 + 31.2) * 18 / 42)
    # TwoLayerCNN on 28 × 28, K = 10: 416 + 12,832 + 5,130 = 18,378 float32 parameters
    assert cell.loc["fedavg", "bytes_per_round"] == 2 * 18378 * 4
    assert cell.loc["scaffold", "bytes_per_round"] == 4 * 18378 * 4
    tab = tuning_table.tuning(_metrics(), report.selected(_metrics(), PARAMS["columns"]), PARAMS).set_index(
        "algorithm")
    assert tab.loc["scaffold", "bytes_per_round"] == 4 * 18378 * 4 and np.isnan(tab.loc["afl", "bytes_per_round"])
    assert np.isnan(tab.loc["bare", "bytes_per_round"])                          # declares no payload: none
    assert tab.loc["fedavg", "cpu_seconds"] == pytest.approx(28.6)                 # the tuning column as before
    assert tab.loc["fedavg", "training_cpu_seconds"] == pytest.approx(28.6 * 18 / 42)
    md = tuning_table.tuning_markdown(tab.reset_index(), PARAMS)
    row = next([c.strip() for c in line.split("|")] for line in md.splitlines() if line.startswith("| scaffold"))
    assert row[1:6] == ["scaffold", "9", "57", "25", "294.0"]                   # 294,048 B; 24.5 CPU-s
    unknown = costs.cell_costs(_metrics(), PARAMS | {"image_side": {}})
    assert unknown["bytes_per_round"].isna().all()                              # no image side: no bytes
    mlr = costs.cell_costs(_metrics(), PARAMS | {"algorithms": ["fedmm", "fedsr"], "model": "logreg"})
    assert np.isnan(mlr.set_index("algorithm").loc["fedmm", "bytes_per_round"])    # no DANN network on MLR
    assert mlr.set_index("algorithm").loc["fedsr", "bytes_per_round"] == 2 * 102410 * 4
    cnn = costs.cell_costs(_metrics(), PARAMS | {"algorithms": ["fedmm"]})
    assert cnn["bytes_per_round"].tolist() == [2 * 69779 * 4]                      # the CNN + its discriminator


def test_the_table_csv_carries_the_cost_of_each_cell(tmp_path, declared):
    files = {k: str(tmp_path / f"t.{k}") for k in ("csv", "md", "tex")}
    report.write("shift_matrix_table", _metrics(), PARAMS, files)
    csv = pd.read_csv(files["csv"]).set_index("algorithm")
    assert csv.loc["scaffold", "bytes_per_round"] == 4 * 18378 * 4
    assert csv.loc["fedavg", "training_cpu_seconds"] == pytest.approx(28.6 * 18 / 42)
    assert "kB per round" in (tmp_path / "t.md").read_text() and "training CPU-s" in (tmp_path / "t.md").read_text()
