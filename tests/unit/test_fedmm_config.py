"""FedMM configuration (schema + cross-checks), run enumeration and resolution, and the report (issue 7)."""

import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from test_wafl_config import merge  # the overlay merge of Snakemake's update_config

from fedshift.config import check_registered, validate_section
from fedshift.errors import ConfigError, load_yaml
from fedshift.contract import load_paper
from fedshift.core.rng import RoundKey
from fedshift.papers import fedmm as P
from fedshift.papers.fedmm import fit as fedmm_fit
from fedshift.papers.fedmm import report as R

SCHEMA = "src/fedshift/papers/fedmm/schema.yaml"


@pytest.fixture()
def section(repo_root):
    """The shipped ``fedmm:`` section (a fresh copy per test)."""
    return load_yaml(repo_root / "config/papers/fedmm.yaml")["fedmm"]


@pytest.fixture()
def schema(repo_root):
    return repo_root / SCHEMA


def paper_datasets(section):
    """The registry datasets the paper needs for ``section`` (the contract's ``Paper.datasets``)."""
    registry = load_yaml(Path(__file__).parents[2] / "config/datasets.yaml")["datasets"]  # Office-31's weights file
    return load_paper("fedmm", "fedshift.papers.fedmm.paper:FedmmPaper",
                      {"fedmm": section, "datasets": registry}).datasets()


def test_shipped_and_quick_configs_are_valid(section, schema, repo_root):
    validate_section(section, schema, "fedmm")
    P.check_section(section)
    assert paper_datasets(section) == ["mnist", "mnist_m_full", "mobilenet_v2", "office31"]
    quick = merge(section, load_yaml(repo_root / "config" / "quick.yaml")["fedmm"])
    validate_section(quick, schema, "fedmm")
    P.check_section(quick)
    assert paper_datasets(quick) == ["mnist", "mnist_m"]
    runs = P.runs_of(quick)
    assert {r for _, r, _ in runs} >= {"fedmm-dann-p1-M20-e1", "fedavg_sgda-dann-p1-M20-e0",
                                       "fedprox_sgda-dann-p1-M20-e0"}
    medium_cfg = load_yaml(repo_root / "config" / "fedmm_medium.yaml")
    assert medium_cfg["scale"] == "fedmm_medium"
    medium = merge(copy.deepcopy(quick), medium_cfg["fedmm"])
    validate_section(medium, schema, "fedmm")
    P.check_section(medium)
    # Fig. 7 at p = 1 over 3 seeds, Fig. 5's M = 50 cell on one seed, both 400 rounds with the compressed schedule
    assert sorted(P.runs_of(medium, "fig7")) == [("digits", r, s) for r in (
        "fedavg_sgda-dann-p1-M20-e0", "fedmm-dann-p1-M20-e1", "fedprox_sgda-dann-p1-M20-e0") for s in range(3)]
    assert P.runs_of(medium, "fig5") == [("digits_m50", "fedmm-dann-p1-M50-e1", 0)]
    medium["figures"]["fig7"]["optimizers"] = ["fedavg_sgda", "fedmm"]  # a subset of the curves
    validate_section(medium, schema, "fedmm")
    assert {r for _, r, _ in P.runs_of(medium, "fig7")} == {"fedavg_sgda-dann-p1-M20-e0", "fedmm-dann-p1-M20-e1"}
    for task, rid in (("digits", "fedmm-dann-p1-M20-e1"), ("digits_m50", "fedmm-dann-p1-M50-e1")):
        r = P.resolve_run(medium, task, rid)
        assert r["train"]["rounds"] == 400 and r["optimizer_settings"]["eta3_decay"] == pytest.approx(1.05 ** 37.5,
                                                                                                      rel=1e-4)
        assert r["preprocessing"] == "per_domain" and r["train"]["batch_split"] == "domain_shares"


def test_paper_scale_run_set_covers_every_output(section):
    runs = P.runs_of(section)
    assert len(runs) == len(set(runs))
    digits = {r for t, r, _ in runs if t == "digits"}
    # Fig. 4: 6 p values x 2 optimizers x 3 heads (Fig. 1's FedAvgSGDA-CDAN runs among them)
    assert {f"{o}-{h}-p{p:g}-M20-e{1 if o == 'fedmm' else 0}" for o in ("fedmm", "fedavg_sgda")
            for h in ("dann", "cdan", "mdd") for p in (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)} <= digits
    assert {r for _, r, _ in P.runs_of(section, "fig5")} == {
        f"fedmm-{h}-p1-M{m}-e{e:g}" for h in ("dann", "cdan", "mdd") for m in (5, 10, 20, 25, 50)
        for e in (0.1, 0.25, 0.5, 0.75, 1.0)}
    assert {"fedsgda-mdd-p1-M1-e0", "fedmm-cdan-p1-M25-e1"} <= {r for _, r, _ in P.runs_of(section, "fig6")}
    fig7 = {r for _, r, _ in P.runs_of(section, "fig7")}
    assert "fedprox_sgda-cdan-s2t1-M20-e0" in fig7 and not any("s1t1" in r for r in fig7)  # s1t1 is p1
    table = P.runs_of(section, "table1")
    assert len(table) == 6 * 3 * 3 and ("office_W_A", "fedsgda-mdd-p1-M1-e0", 0) in table


def test_resolve_run_takes_head_rounds_and_optimizer_settings(section):
    r = P.resolve_run(section, "digits", "fedmm-mdd-p0.7-M25-e0.5")
    assert r["train"]["rounds"] == 50_000 and r["train"]["local_steps"] == 25 and r["nu"] == 0.5
    assert r["optimizer_settings"] == {"mu": 2.0, "mu_adversary": 2.0, "eta3": 0.5, "eta3_every": 100,
                                       "eta3_decay": 1.01}
    assert P.resolve_run(section, "digits", "fedprox_sgda-dann-p1-M20-e0")["optimizer_settings"] == {"mu": 2.0}
    s = P.resolve_run(section, "office_A_W", "fedsgda-dann-p1-M1-e0")
    assert s["train"]["rounds"] == 40_000 and s["train"]["local_steps"] == 1 and s["nu"] == 0.25
    with pytest.raises(ConfigError, match="malformed"):
        P.resolve_run(section, "digits", "fedmm-dann-p1")
    with pytest.raises(ConfigError, match="unknown FedMM task"):
        P.resolve_run(section, "svhn", "fedmm-dann-p1-M20-e1")
    assert P.parse_run_id(P.run_id("fedavg_sgda", "cdan", "s2t2", 20, 0)) == {
        "optimizer": "fedavg_sgda", "head": "cdan", "clients": "s2t2", "local_steps": 20, "eta3": 0.0}


def test_client_settings():
    assert P.client_settings("p0.75") == [(0.75, 0.25), (0.25, 0.75)]
    assert P.client_settings("s2t1") == [(0.5, 0.0), (0.5, 0.0), (0.0, 1.0)]
    for bad in ("p0.3", "q1", "s0t2", "p1.5"):
        with pytest.raises(ConfigError):
            P.client_settings(bad)


@pytest.mark.parametrize("p, want", [(0.5, {"domain_shares": [(16, 16), (16, 16)], "client_rows": [(24, 8), (24, 8)]}),
                                     (0.75, {"domain_shares": [(24, 8), (8, 24)], "client_rows": [(29, 3), (16, 16)]}),
                                     (1.0, {"domain_shares": [(32, 0), (0, 32)], "client_rows": [(32, 0), (0, 32)]})])
def test_batch_split_key_sets_every_clients_source_target_counts(section, repo_root, monkeypatch, p, want):
    """``train.batch_split`` (quick scale, batch 32, 20,000 source and 6,301 target rows so that the two readings
    differ): ``domain_shares`` (default, official) gives each client's batch by its shares of the two domains,
    ``client_rows`` by its own rows; at p = 1 both give every client its one domain."""
    from fedshift.algorithms import sgda_local

    quick = merge(section, load_yaml(repo_root / "config" / "quick.yaml")["fedmm"])
    assert quick["tasks"]["digits"]["train"]["batch_split"] == section["tasks"]["digits"]["train"]["batch_split"] \
        == "domain_shares"
    parts = P.split_clients(20000, 6301, P.client_settings(f"p{p:g}"), seed=0)
    clients = [sgda_local.AdaptationClient(i, torch.zeros(len(c["source"]), 1), torch.zeros(len(c["source"]),
                                     dtype=torch.long), torch.zeros(len(c["target"]), 1))
               for i, c in enumerate(parts)]
    seen = {}
    monkeypatch.setattr(fedmm_fit, "network_directions", lambda module, **kw: seen.update(kw) or (lambda c, k: None))
    for split in ("domain_shares", "client_rows"):
        r = P.resolve_run(quick, "digits", f"fedavg_sgda-dann-p{p:g}-M20-e0")
        r["train"]["batch_split"] = split
        P.build_algorithm(r, torch.nn.Linear(1, 1), [0, 1], (20000, 6301))
        got = [tuple(a.shape[1] for a in sgda_local.local_batches(c, RoundKey(0, 0), 2, seen["batch_size"],
                                                              seen["domain_sizes"])) for c in clients]
        assert got == want[split], split
    r["train"]["batch_split"] = "rows"
    with pytest.raises(ConfigError, match="train.batch_split"):
        P.build_algorithm(r, torch.nn.Linear(1, 1), [0, 1], (20000, 6301))


@pytest.mark.parametrize("edit, message", [
    (lambda s: s["figures"]["fig4"].update(task="office_A_W"), "is an Office-31 task"),
    (lambda s: s["figures"]["table1"].update(tasks=["digits"]), "not an Office-31 task"),
    (lambda s: s["figures"]["fig6"].update(task="svhn"), "unknown task"),
    (lambda s: s["tasks"]["digits"]["heads"].pop("mdd"), "configures no head 'mdd'"),
    (lambda s: s["tasks"]["digits"]["train"].update(checkpoint_every=150), "multiple of eval_every"),
    (lambda s: s["figures"]["fig7"].update(clients=["s0t3"]), "at least one source"),
    (lambda s: s["figures"].pop("fig5"), "enabled but not configured"),
    (lambda s: s["tasks"]["office_A_W"].pop("transfer"), "transfer"),
])
def test_check_config_rejects_bad_cross_references(section, edit, message):
    edit(section)
    with pytest.raises(ConfigError, match=message):
        P.check_section(section)


def test_datasets_come_from_the_registry(section, repo_root):
    """Every raw file of the enabled outputs is a registry entry; one the registry lacks fails the check."""
    registry = load_yaml(repo_root / "config/datasets.yaml")["datasets"]
    check_registered({"fedmm": paper_datasets(section)}, registry)
    section["tasks"]["digits"]["target"] = "mnist_m_full"
    assert paper_datasets(section) == ["mnist", "mnist_m_full", "mobilenet_v2", "office31"]
    section["tasks"]["digits"]["target"] = "mnist_m_bsds"
    registry.pop("bsds500")
    with pytest.raises(ConfigError, match="at fedmm: the enabled outputs need dataset 'bsds500'"):
        check_registered({"fedmm": paper_datasets(section)}, registry)
    section["outputs"] = ["table1"]
    assert paper_datasets(section) == ["mobilenet_v2", "office31"]
    check_registered({"fedmm": paper_datasets(section)}, registry)


def test_schema_rejects_bad_values(section, schema):
    bad = copy.deepcopy(section)
    bad["tasks"]["digits"]["heads"]["dann"]["eta3_decay"] = 0.9
    with pytest.raises(ConfigError, match=r"fedmm\.tasks\.digits\.heads\.dann\.eta3_decay"):
        validate_section(bad, schema, "fedmm")
    bad = copy.deepcopy(section)
    bad["figures"]["fig4"]["p"] = [0.2]
    with pytest.raises(ConfigError, match=r"fedmm\.figures\.fig4\.p"):
        validate_section(bad, schema, "fedmm")
    bad = copy.deepcopy(section)
    bad["sources"] = {}  # the former section: its files are registry entries now
    with pytest.raises(ConfigError, match="sources"):
        validate_section(bad, schema, "fedmm")


# ---------------------------------------------------------------------------------------------- report

def _history(root, task, run, seed, accs):
    d = root / "runs" / "fedmm" / task / run / f"seed~{seed}"
    d.mkdir(parents=True)
    pd.DataFrame({"round": [100 * (i + 1) for i in range(len(accs))], "loss": 0.0,
                  "target_accuracy": accs}).to_csv(d / "history.csv", index=False)
    return d / "history.csv"


def test_rounds_to_converge_and_table1(tmp_path):
    paths = [_history(tmp_path, "office_A_W", "fedmm-dann-p1-M10-e1", 0, [0.3, 0.6, 0.645, 0.65]),
             _history(tmp_path, "office_A_W", "fedsgda-dann-p1-M1-e0", 0, [0.1, 0.2, 0.3, 0.5]),
             _history(tmp_path, "office_D_W", "fedmm-dann-p1-M10-e1", 0, [np.nan])]
    out = {k: str(tmp_path / f"t.{k}") for k in ("csv", "md")}
    t = R.make_output("table1", {"converge_within": 0.01}, paths, out).set_index(["task", "optimizer"])
    assert t.loc[("A_W", "fedmm"), "cr"] == 3.0          # 64.5 is within 1 point of 65
    assert t.loc[("A_W", "fedmm"), "accuracy"] == pytest.approx(65.0)
    assert t.loc[("A_W", "fedsgda"), "cr"] == 4.0
    assert (t.loc[("A_W", "fedmm"), "paper_cr"], t.loc[("A_W", "fedmm"), "paper_accuracy"]) == (13, 65.5)
    assert np.isnan(t.loc[("D_W", "fedmm"), "cr"])
    md = open(out["md"]).read()
    assert "| FedMM | DANN | 3 / 65.0 [13 / 65.5]" in md


@pytest.mark.parametrize("name", ["fig4", "fig5", "fig7"])
def test_figures_are_drawn_from_histories(tmp_path, name):
    runs = {"fig4": ["fedmm-dann-p1-M20-e1", "fedavg_sgda-dann-p1-M20-e0", "fedmm-dann-p0.5-M20-e1",
                     "fedavg_sgda-dann-p0.5-M20-e0"],
            "fig5": ["fedmm-cdan-p1-M10-e0.5", "fedmm-cdan-p1-M20-e0.5", "fedmm-cdan-p1-M10-e1",
                     "fedmm-cdan-p1-M20-e1"],
            "fig7": ["fedmm-dann-p1-M20-e1", "fedavg_sgda-dann-p1-M20-e0", "fedprox_sgda-dann-p1-M20-e0"]}[name]
    paths = [_history(tmp_path, "digits", r, s, [0.2 + 0.1 * i, 0.3 + 0.1 * i + 0.01 * s])
             for i, r in enumerate(runs) for s in range(2)]
    out = {k: str(tmp_path / f"{name}.{k}") for k in ("csv", "pdf", "png")}
    t = R.make_output(name, {}, paths, out)
    assert (tmp_path / f"{name}.png").stat().st_size > 1000 and (tmp_path / f"{name}.pdf").is_file()
    assert set(t["runs"]) == {2}
    if name == "fig4":
        row = t[(t.optimizer == "fedmm") & (t.p == 1.0)].iloc[0]
        assert row["mean"] == pytest.approx(100 * (0.3 + 0.005))
    if name == "fig7":
        assert sorted(set(t["round"])) == [100, 200]
    with pytest.raises(ValueError, match="not a FedMM history"):
        R.collect([tmp_path / "history.csv"])


def test_runs_table_gives_final_and_last_four_evaluations_and_the_claims_pair_them_by_seed(tmp_path, section):
    """The per-run table (``fig7_runs.csv``) holds each run's final accuracy and the mean of its last four
    evaluations; the shipped claims read it, pairing FedMM and FedAvgSGDA by seed (paired t interval)."""
    from fedshift.claims import evaluate_claims

    accs = {("fedmm", 0): [0.1, 0.5, 0.6, 0.5, 0.4, 0.3], ("fedmm", 1): [0.1, 0.5, 0.5, 0.5, 0.5, 0.52],
            ("fedmm", 2): [0.1, 0.2, 0.3, 0.4, 0.5, 0.6], ("fedavg_sgda", 0): [0.1] * 6,
            ("fedavg_sgda", 1): [0.1, 0.2, 0.2, 0.2, 0.2, 0.3], ("fedavg_sgda", 2): [0.2] * 6}
    runs = {"fedmm": "fedmm-dann-p1-M20-e1", "fedavg_sgda": "fedavg_sgda-dann-p1-M20-e0"}
    paths = [_history(tmp_path, "digits", runs[o], seed, a) for (o, seed), a in accs.items()]
    out = {k: str(tmp_path / f"fig7.{k}") for k in ("csv", "pdf", "png")} | {"runs": str(tmp_path / "runs.csv")}
    R.make_output("fig7", {}, paths, out)
    t = pd.read_csv(out["runs"]).set_index(["optimizer", "seed"])
    assert t.loc[("fedmm", 0), "final"] == pytest.approx(30.0) and t.loc[("fedmm", 0), "last_round"] == 600
    assert t.loc[("fedmm", 0), "last4"] == pytest.approx(100 * (0.6 + 0.5 + 0.4 + 0.3) / 4)
    assert t.loc[("fedmm", 2), "p"] == 1.0 and t.loc[("fedmm", 2), "evaluations"] == 6
    claims = {c["id"]: c for c in load_yaml(Path(__file__).parents[2] / "config/papers/fedmm.yaml")["claims"]["fedmm"]}
    v = evaluate_claims({"fedmm": [claims["fedmm_fig7_scratch_lead"], claims["fedmm_fig7_scratch_lead_last4"]]},
                        {"results/tables/fedmm/fig7_runs.csv": pd.read_csv(out["runs"])}, scale="fedmm_medium")
    final = [100 * (accs[("fedmm", s)][-1] - accs[("fedavg_sgda", s)][-1]) for s in range(3)]
    assert list(v["claim"]) == ["fedmm_fig7_scratch_lead[head=dann,clients=p1]",
                                "fedmm_fig7_scratch_lead_last4[head=dann,clients=p1]"]
    assert v["ours"].iloc[0] == pytest.approx(np.mean(final)) and set(v["interval"]) == {"paired t"}
    assert set(v["n"]) == {3} and v["ours"].iloc[1] != pytest.approx(v["ours"].iloc[0])


def test_fig5_cells_show_mean_std_and_seeds(tmp_path, monkeypatch):
    """Fig. 5's heatmap writes mean ± std over seeds and the number of seeds in each cell."""
    paths = [_history(tmp_path, "digits", r, s, [0.4 + 0.1 * s])
             for r in ("fedmm-dann-p1-M20-e1", "fedmm-dann-p1-M50-e1") for s in range(3)]
    texts = []
    real = R.plt.Axes.text
    monkeypatch.setattr(R.plt.Axes, "text", lambda self, *a, **k: texts.append(a[2]) or real(self, *a, **k))
    R.make_output("fig5", {}, paths, {k: str(tmp_path / f"fig5.{k}") for k in ("csv", "pdf", "png")})
    assert texts == ["50.0\n± 10.0\n(3 seeds)"] * 2


# ---------------------------------------------------------------------------------------------- plug-in

def _plugin(section, budget=None):
    config = {"fedmm": section, "datasets": load_yaml(Path(__file__).parents[2] / "config/datasets.yaml")["datasets"]}
    if budget:
        config["budget"] = budget
    return load_paper("fedmm", "fedshift.papers.fedmm.paper:FedmmPaper", config)


def test_plugin_runs_are_typed_specs_with_todays_ids(section):
    """Runs, partitions and inputs of the plug-in: the ids of runs_of, the hparams of resolve_run (budget
    applied), η₃ from the figure's typed value (never parsed back from the id), and defaults merged into tasks."""
    paper = _plugin(section, {"max_rounds": 2})
    specs = paper.runs()
    assert [(s.experiment, s.run, s.seed) for s in specs] == P.runs_of(section)
    for s in specs[:40]:
        assert dict(s.hparams) == P.resolve_run(section, s.experiment, s.run, {"max_rounds": 2})
        assert s.algorithms == (s.hparams["optimizer"],) and s.hparams["train"]["rounds"] == 2
    cell = next(s for s in specs if s.run == "fedmm-mdd-p1-M5-e0.25")
    assert cell.hparams["optimizer_settings"]["eta3"] == 0.25 and cell.hparams["eta3"] == 0.25
    assert cell.hparams["optimizer_settings"]["mu"] == 2.0  # from fedmm.defaults
    assert paper.inputs(cell) == {"source": "data/prepared/mnist.pt", "target": "data/prepared/mnist_m_full.pt",
                                  "partition": "data/partitions/fedmm/digits/p1.json"}
    office = next(s for s in specs if s.experiment == "office_D_A")
    assert paper.inputs(office)["weights"] == "data/raw/mobilenet_v2/mobilenet_v2-b0353104.pth"
    parts = {p.name: p for p in paper.partitions()}
    assert {"digits/p0.5.json", "digits/s2t2.json", "office_W_A/p1.json"} <= set(parts) and len(parts) == 6 + 3 + 6
    assert parts["digits/s2t1.json"].params["clients"] == "s2t1"
    outs = {o.name: o for o in paper.outputs()}
    assert set(outs) == {f"fedmm_{o}" for o in P.OUTPUTS} and outs["fedmm_table1"].label == "Table 1"
    assert outs["fedmm_fig5"].inputs[0] == "results/runs/fedmm/digits/fedmm-dann-p1-M5-e0.1/seed~0/metrics.csv"
    section["defaults"].pop("fedprox")
    with pytest.raises(ConfigError, match=r"fedmm\.tasks\.digits\.fedprox"):
        _plugin(section).validate()


def test_plugin_evaluate_gives_the_history_as_tidy_rows_and_the_same_table(section, tmp_path):
    paper = _plugin(section)
    spec = next(s for s in paper.runs() if s.run == "fedmm-dann-p1-M20-e1")
    hist = _history(tmp_path, "digits", spec.run, 0, [0.25, np.nan, 0.5])
    rows = paper.evaluate(spec, {}, {"history": str(hist)}, device="cpu")
    assert rows["value"].tolist()[::2] == [0.25, 0.5] and set(rows["metric"]) == {"target_accuracy"}
    metrics = hist.with_name("metrics.csv")
    rows.to_csv(metrics, index=False)
    pd.testing.assert_frame_equal(R.collect([metrics]), R.collect([hist]))
