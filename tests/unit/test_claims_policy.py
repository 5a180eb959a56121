"""Claims counted as claims: p-values, the multiplicity policy, same-data rows, statuses, work ratios, rejudging."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fedshift.claims import (
    adjust_multiplicity,
    claim_counts,
    claims_markdown,
    decision_p_value,
    effect_verdict,
    evaluate_claims,
    read_claims_csv,
    t_interval,
    validate_claims,
    work_ratio,
)


def runs(a, b, *, extra=None):
    """One row per (model, seed): model a's and b's values, paired by seed."""
    rows = [{"model": m, "seed": s, "value": v} for m, vals in (("a", a), ("b", b)) for s, v in enumerate(vals)]
    return pd.DataFrame(rows + (extra or []))


def claim(cid="lead", table="t.csv", **over):
    base = {"id": cid, "where": "Table 1", "quote": "A beats B.",
            "quantity": {"table": table, "description": "a − b (points, paired by seed)", "a": {"model": "a"},
                         "b": {"model": "b"}, "pair_by": "seed", "scale": 100},
            "paper_value": 2.0, "test": {"op": "greater", "value": 0},
            "effect": {"margin": 0.5, "reason": "half a point"}}
    base.update(over)
    return base


# --- p-values ---------------------------------------------------------------------------------------------------------


def test_the_p_value_of_a_direction_is_twice_the_one_sided_t_test():
    diffs = np.array([0.8, 1.1, 1.9, 1.4])
    se, df = diffs.std(ddof=1) / 2, 3
    mean, lo, hi = t_interval(diffs)
    v = effect_verdict(lo, hi, {"op": "greater", "value": 0})
    assert v == "reproduced"
    p = decision_p_value(mean, se, df, {"op": "greater", "value": 0}, v)
    assert p == pytest.approx(stats.ttest_1samp(diffs, 0.0).pvalue)            # two-sided = 2 × one-sided here
    wrong = decision_p_value(-mean, se, df, {"op": "greater", "value": 0}, "not reproduced")
    assert wrong == pytest.approx(p)                                            # the mirror image: x < 0


@pytest.mark.parametrize("seed", range(40))
def test_p_below_five_percent_exactly_when_the_interval_decides(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 12))
    values = rng.normal(rng.normal(0, 2), rng.uniform(0.2, 4), size=n)
    test = [{"op": "greater", "value": 0}, {"op": "at_least", "value": 0, "tolerance": 1},
            {"op": "within", "value": 2, "tolerance": 1.5}, {"op": "less", "value": 1}][seed % 4]
    effect = {"margin": 0.4, "size_tolerance": 0.5} if test["op"] in ("greater",) else {}
    paper = 2.0 if test["op"] in ("greater", "within") else None
    mean, lo, hi = t_interval(values)
    v = effect_verdict(lo, hi, test, paper, effect)
    p = decision_p_value(mean, values.std(ddof=1) / math.sqrt(n), n - 1, test, v, paper, effect)
    assert 0 <= p <= 1
    assert (p < 0.05) == (v != "inconclusive"), (v, p, lo, hi)


def test_rows_without_a_standard_error_or_a_computed_verdict_have_no_p():
    assert math.isnan(decision_p_value(1.0, float("nan"), float("nan"), {"op": "greater", "value": 0}, "inconclusive"))
    assert math.isnan(decision_p_value(1.0, 0.2, 3, {"op": "greater", "value": 0}, "not run"))


# --- multiplicity and same-data rows ---------------------------------------------------------------------------------


def test_bh_and_holm_are_statsmodels_over_the_family_and_same_data_counts_once():
    from statsmodels.stats.multitest import multipletests

    t = {"t.csv": runs([0.72, 0.73, 0.74, 0.75], [0.70, 0.70, 0.71, 0.70]),
         "u.csv": runs([0.71, 0.70, 0.72, 0.70], [0.70, 0.71, 0.70, 0.70])}
    claims = {"p": [claim("lead"), claim("again", quote="A beats B again."),              # same data, same test
                    claim("other", "u.csv"),
                    claim("later", "u.csv", exploratory="looked at after the data", quote="later")]}
    out = evaluate_claims(claims, t, scale="decisive").set_index("claim")
    assert out.at["again", "same_as"] == "lead" and out.at["lead", "same_as"] == ""
    assert out.at["later", "same_as"] == "other"             # the same data, but in another family
    assert out.at["later", "family"] == "exploratory" and out.at["lead", "family"] == "confirmatory"
    family = out.loc[["lead", "other"], "p"].to_numpy()       # "again" repeats "lead": one test, not two
    assert out.loc[["lead", "other"], "p_bh"].to_numpy() == pytest.approx(multipletests(family, method="fdr_bh")[1])
    assert out.loc[["lead", "other"], "p_holm"].to_numpy() == pytest.approx(multipletests(family, method="holm")[1])
    assert out.at["again", "p_bh"] == out.at["lead", "p_bh"]
    assert out.at["later", "p_bh"] == pytest.approx(out.at["later", "p"])       # a family of one: unadjusted
    assert out.at["lead", "multiplicity"] in ("kept under BH and Holm", "kept under BH, not Holm")


def test_a_row_lost_under_holm_but_kept_under_bh_says_so():
    t = pd.DataFrame({"claim": list("abc"), "paper": "p", "test": "x > 0", "ours": [1.0, 2.0, 3.0],
                      "ci_low": [0.1, 0.2, 0.3], "ci_high": [2.0, 3.0, 4.0], "n": 3, "interval": "paired t",
                      "verdict": "reproduced", "p": [0.04, 0.03, 0.02], "exploratory": "", "proxy": "",
                      "work_ratio": [1.0, 0.5, float("nan")]})
    out = adjust_multiplicity(t)
    assert list(out["p_bh"]) == pytest.approx([0.04, 0.04, 0.04])
    assert list(out["p_holm"]) == pytest.approx([0.06, 0.06, 0.06])
    assert set(out["multiplicity"]) == {"kept under BH, not Holm"}
    assert list(out["category"]) == ["paper settings", "reduced settings", "scale not stated"]


# --- statuses, proxies and counts --------------------------------------------------------------------------------------


def test_a_claim_with_a_status_gets_its_row_without_a_table_and_counts_as_one():
    needs = {"id": "so", "where": "Table 1", "quote": "q", "paper_value": "above", "status": "needs data",
             "data": ["stackoverflow_tff"], "reason": "the pipeline builds table1_stackoverflow"}
    cannot = {"id": "gone", "where": "Fig. 9", "quote": "q", "paper_value": "x", "status": "cannot be reproduced",
              "reason": "the figure's data were never released"}
    proxy = claim("proxy", proxy="the paper has no such experiment")
    t = {"t.csv": runs([0.72, 0.73, 0.74], [0.70, 0.70, 0.71])}
    out = evaluate_claims({"p": [claim(), needs, cannot, proxy]}, t, scale="decisive")
    by = out.set_index("claim")
    assert by.at["so", "verdict"] == "needs data: stackoverflow_tff" and by.at["so", "note"].startswith("the pipe")
    assert by.at["gone", "verdict"] == "cannot be reproduced" and by.at["gone", "category"] == "cannot be reproduced"
    assert by.at["proxy", "category"] == "proxy" and by.at["proxy", "same_as"] == "lead"
    k = claim_counts(out).set_index("category")
    assert k.at["needs data", "comparisons"] == 1 and k.at["cannot be reproduced", "comparisons"] == 1
    assert k.at["scale not stated", "comparisons"] == 1 and k.at["proxy", "comparisons"] == 0   # same data as lead
    md = claims_markdown(out)
    assert "*(proxy; same data as lead)*" in md and "**Claims**: 3 distinct comparisons" in md
    assert "Multiplicity:" in md
    from fedshift import docsgen

    page, readme = docsgen.verdict_counts_markdown(out), docsgen.verdict_counts_markdown(out, compact=True)
    assert "| needs data | 1 | 0 | 1 | 0 | 0 | 0 |" in page and "Confirmatory family: 1 tests" in page
    assert "**Claims**: 3 comparisons (rows with the same data count once) in 4 rows" in readme
    assert "| claims by category |" not in readme and "1 rows that repeat" in readme


@pytest.mark.parametrize("bad, path", [
    ({"status": "needs data", "reason": "r"}, r"claims\.p\[0\]\.data"),
    ({"status": "needs data", "data": ["x"], "reason": "r", "quantity": {"table": "t", "a": {}}},
     r"claims\.p\[0\]: a claim with status"),
    ({"status": "lost", "reason": "r"}, r"claims\.p\[0\]\.status"),
    ({"status": "cannot be reproduced"}, r"claims\.p\[0\]: missing key 'reason'"),
])
def test_a_bad_status_names_its_key_path(bad, path):
    base = {"id": "x", "where": "w", "quote": "q", "paper_value": "v"}
    with pytest.raises(ValueError, match=path):
        validate_claims({"p": [{**base, **bad}]})


# --- work ratios -------------------------------------------------------------------------------------------------------


def test_the_work_ratio_reads_our_side_from_the_configuration():
    settings = {"w": {"experiments": {"mnist": {"train": {"rounds": 60}}}, "defaults": {"epochs": 2, "n": 300}}}
    work = {"paper": {"rounds": 200, "clients": 10, "local_steps": 2, "data_fraction": 1},
            "ours": {"rounds": "@w.experiments.{experiment}.train.rounds", "clients": 10,
                     "local_steps": "@w.defaults.epochs", "data_fraction": "@w.defaults.n / 2000"}}
    ratio, text = work_ratio(work, settings, "claims.w[0].work", "experiment=mnist")
    assert ratio == pytest.approx(60 / 200 * 300 / 2000)
    assert text == "rounds 60/200, data fraction 0.15/1"
    with pytest.raises(ValueError, match=r"claims\.w\[0\]\.work\.ours\.rounds: config key 'w\.experiments\.cifar"):
        work_ratio(work, settings, "claims.w[0].work", "experiment=cifar")
    keyed = {**work, "group_keys": [{"group": "MNIST C=3", "key": "mnist"}],
             "ours": {**work["ours"], "rounds": "@w.experiments.{key}.train.rounds"}}
    assert work_ratio(keyed, settings, "x", "row=MNIST C=3")[0] == pytest.approx(ratio)
    assert math.isnan(work_ratio(work, None, "x", "experiment=mnist")[0])       # no configuration: not computed
    with pytest.raises(ValueError, match="not arithmetic"):
        work_ratio({**work, "ours": {**work["ours"], "clients": "__import__('os')"}}, settings, "x", "experiment=mnist")


def test_a_claims_work_shows_on_its_rows_and_sets_its_category():
    settings = {"r": 30}
    work = {"paper": {"rounds": 300, "clients": 1, "local_steps": 1, "data_fraction": 1},
            "ours": {"rounds": "@r", "clients": 1, "local_steps": 1, "data_fraction": 1}}
    t = {"t.csv": runs([0.72, 0.73, 0.74], [0.70, 0.70, 0.71])}
    row = evaluate_claims({"p": [claim(work=work)]}, t, scale="quick", settings=settings).iloc[0]
    assert row["work_ratio"] == pytest.approx(0.1) and row["work"] == "rounds 30/300"
    assert row["category"] == "reduced settings"
    assert "| 0.1× |" in claims_markdown(pd.DataFrame([row]))


# --- the committed snapshot, judged again ------------------------------------------------------------------------------


def test_rejudging_a_snapshot_recomputes_every_row_and_keeps_the_second_run(tmp_path):
    from fedshift.claims import compare_runs
    from fedshift.claims.rejudge import rejudge_snapshot

    snap = tmp_path / "snapshot"
    (snap / "tables" / "p").mkdir(parents=True)
    table = runs([0.72, 0.73, 0.74], [0.70, 0.70, 0.71])
    table.to_csv(snap / "tables" / "p" / "t.csv", index=False)
    claims = {"p": [claim(table="results/tables/p/t.csv")]}
    first = evaluate_claims(claims, {"results/tables/p/t.csv": table}, scale="decisive", config="c.yaml",
                            machine="M")
    second = evaluate_claims(claims, {"results/tables/p/t.csv": runs([0.72, 0.70], [0.70, 0.71])},
                             scale="decisive", machine="M2")
    compare_runs(first, second).to_csv(snap / "tables" / "claims.csv", index=False)
    new = {"id": "new", "where": "w", "quote": "q", "paper_value": "v", "status": "needs data", "data": ["cifar10"],
           "reason": "r"}
    out = rejudge_snapshot(snap, {"claims": {"p": [*claims["p"], new]}})
    assert list(out["claim"]) == ["lead", "new"]
    assert out.at[0, "ours"] == pytest.approx(first.at[0, "ours"]) and out.at[0, "scale"] == "decisive"
    assert out.at[0, "config"] == "c.yaml" and out.at[0, "machine"] == "M"
    assert out.at[0, "second_verdict"] == "inconclusive" and out.at[0, "agreement"] == "different"
    assert out.at[1, "second_verdict"] == "" and out.at[1, "verdict"] == "needs data: cifar10"
    out.to_csv(tmp_path / "back.csv", index=False)
    assert read_claims_csv(tmp_path / "back.csv").at[0, "p_bh"] == pytest.approx(out.at[0, "p_bh"])
    with pytest.raises(ValueError, match=r"claims\.q: the snapshot's claims\.csv has no row"):
        rejudge_snapshot(snap, {"claims": {"q": [new]}})


def test_the_counts_per_paper_leave_exploratory_rows_out_of_the_verdicts():
    from fedshift import docsgen

    t = {"t.csv": runs([0.72, 0.73, 0.74], [0.70, 0.70, 0.71]),
         "u.csv": runs([0.60, 0.61, 0.62], [0.70, 0.70, 0.71])}
    out = evaluate_claims({"p": [claim(), claim("after", "u.csv", exploratory="seen first", quote="after")]}, t,
                          scale="decisive")
    counts = docsgen.verdict_counts(out).iloc[0]
    assert counts["reproduced"] == 1 and counts["not reproduced"] == 0 and counts["exploratory"] == 1
    text = docsgen.verdict_counts_markdown(out)
    assert "| reproduced | exploratory |" in text and "| p | 3 | 1 | 1 |" in text


def test_a_work_path_falls_back_in_order_and_a_group_key_can_name_one_field():
    settings = {"e": {"defaults": {"rounds": 200, "n": None}, "x": {}}}
    work = {"group_keys": [{"group": "dann", "key": "15000"}],
            "paper": {"rounds": "{key}", "clients": 1, "local_steps": 1, "data_fraction": 1},
            "ours": {"rounds": "@(e.x.rounds, e.defaults.rounds)", "clients": 1, "local_steps": 1,
                     "data_fraction": "@(e.x.n, e.defaults.n, 600) / 600"}}
    ratio, text = work_ratio(work, settings, "w", "head=dann,p=1")
    assert ratio == pytest.approx(200 / 15000) and text == "rounds 200/15,000"
    ratio, text = work_ratio(work, settings, "w", "head=mdd,p=1")      # no key for mdd: said, not guessed
    assert math.isnan(ratio) and text == "not stated for this row"
    with pytest.raises(ValueError, match=r"w\.paper\.rounds: .* names the group field 'head'"):
        work_ratio({**work, "paper": {**work["paper"], "rounds": "{head}"}}, settings, "w", "p=1")
    with pytest.raises(ValueError, match=r"w\.ours\.rounds: none of \['e\.x\.rounds', 'e\.y'\]"):
        work_ratio({**work, "ours": {**work["ours"], "rounds": "@(e.x.rounds, e.y)"}}, settings, "w", "head=dann")


@pytest.mark.parametrize("overlays", [[], ["config/quick.yaml"], ["config/quick.yaml", "config/decisive.yaml"],
                                      ["config/quick.yaml", "config/verdicts.yaml"], ["config/rehearsal.yaml"],
                                      ["config/fedmm_medium.yaml"], ["config/quick.yaml", "config/wafl_official.yaml"]])
def test_every_committed_claims_work_resolves_at_every_scale(overlays):
    """The claims job reads each row's work from the configuration that ran: no scale may leave a path unresolved."""
    from fedshift.claims.rejudge import merged_config

    config = merged_config(overlays)
    groups = {"afl": [""], "agnostic_fedavg": [""],
              "fedmm": ["head=dann,clients=p1", "head=cdan,p=0.5", "head=mdd"],
              "fedpals": ["row=Fashion-MNIST C=3", "row=Fashion-MNIST C=2", ""],
              "wafl": ["experiment=mnist", "experiment=cifar10", "experiment=mnist_official,fraction=0.2",
                       "column=mt_mm", "column=mm_up", ""]}
    import re

    checked = 0
    for paper, items in config["claims"].items():
        for i, c in enumerate(items):
            if "work" not in c:
                continue
            wanted = set(re.findall(r"\{(\w+)\}", str(c["work"]["paper"]) + str(c["work"]["ours"])))
            keyed = {str(e["group"]) for e in c["work"].get("group_keys", [])}
            rows = [g for g in groups[paper] if g and wanted - {"key"} <= {f.split("=")[0] for f in g.split(",")}
                    and ("key" not in wanted or keyed & {f.split("=")[1] for f in g.split(",")} | {
                        ",".join(f.split("=")[1] for f in g.split(","))})] if wanted else [""]
            assert rows, (paper, c["id"])                                # every claim's work is checked somewhere
            for g in rows:
                ratio, _ = work_ratio(c["work"], config, f"claims.{paper}[{i}].work", g)
                assert ratio > 0, (paper, c["id"], g)
                checked += 1
    assert checked >= 20
