"""Claims as data (fedshift.claims): intervals, verdicts on constructed tables, README block rewriting."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fedshift.claims import (
    boundaries,
    claims_markdown,
    estimate,
    evaluate_claims,
    paper_number,
    replication_robust,
    rewrite_readme_block,
    runs_machine,
    t_interval,
    validate_claims,
    verdict,
    welch_interval,
)


def runs_table(afl, uniform):
    """Per-run rows as AFL's runs table: one accuracy per (model, seed)."""
    rows = [{"model": m, "seed": s, "column": "D_Lambda", "metric": "accuracy", "value": v}
            for m, vals in (("afl", afl), ("uniform", uniform)) for s, v in enumerate(vals)]
    return pd.DataFrame(rows)


def lead_claim(table="t.csv", **test):
    return {"id": "lead", "paper": "afl", "where": "Table 1", "quote": "AFL is better.", "paper_value": 1.92,
            "test": test or {"op": "greater", "value": 0},
            "quantity": {"table": table, "description": "AFL − uniform (points, paired)", "scale": 100,
                         "a": {"model": "afl", "column": "D_Lambda"}, "b": {"model": "uniform", "column": "D_Lambda"},
                         "pair_by": "seed"}}


def test_t_interval_matches_scipy():
    v = [1.0, 2.0, 4.0, 7.0]
    mean, lo, hi = t_interval(v)
    ref = stats.t.interval(0.95, len(v) - 1, loc=np.mean(v), scale=stats.sem(v))
    assert mean == pytest.approx(3.5)
    assert (lo, hi) == pytest.approx(ref)
    assert math.isnan(t_interval([3.0])[1])
    with pytest.raises(ValueError, match="finite"):
        t_interval([1.0, float("nan")])


def test_welch_interval_matches_scipy_test_at_its_edge():
    a, b = (5.0, 1.0, 6), (3.0, 2.0, 4)
    d, lo, hi = welch_interval(a, b)
    assert d == pytest.approx(2.0)
    # at the interval's lower end, Welch's test of mean(a) − mean(b) − lo = 0 has p = 0.05 exactly
    p = stats.ttest_ind_from_stats(a[0] - lo, a[1], a[2], b[0], b[1], b[2], equal_var=False).pvalue
    assert p == pytest.approx(0.05, rel=1e-6)
    assert hi - d == pytest.approx(d - lo)


@pytest.mark.parametrize("afl, uniform, expected", [
    ([0.72, 0.73, 0.71, 0.72, 0.74], [0.70, 0.70, 0.69, 0.70, 0.71], "reproduced"),        # clear win
    ([0.66, 0.67, 0.65, 0.66, 0.66], [0.70, 0.70, 0.69, 0.70, 0.71], "not reproduced"),    # clear loss
    ([0.70, 0.74, 0.66, 0.73, 0.69], [0.70, 0.70, 0.69, 0.70, 0.71], "inconclusive"),      # straddles 0
])
def test_verdict_of_a_paired_lead(afl, uniform, expected):
    t = evaluate_claims({"afl": [lead_claim()]}, {"t.csv": runs_table(afl, uniform)}, scale="quick")
    row = t.iloc[0]
    diffs = 100 * (np.array(afl) - np.array(uniform))
    assert row["ours"] == pytest.approx(diffs.mean())
    assert row["interval"] == "paired t" and row["n"] == 5
    assert row["verdict"] == expected
    assert (row["ci_low"] <= row["ours"] <= row["ci_high"])


def test_pairing_is_by_seed_not_by_row_order():
    t = runs_table([0.72, 0.80], [0.70, 0.78])
    shuffled = pd.concat([t[t.model == "afl"], t[t.model == "uniform"].iloc[::-1]])
    est = estimate(shuffled, lead_claim()["quantity"])
    assert est["ours"] == pytest.approx(2.0)
    assert est["ci_low"] == pytest.approx(2.0) and est["ci_high"] == pytest.approx(2.0)   # equal differences


def test_a_nan_run_is_an_error_unless_the_claim_drops_it():
    """FedPALS's per-seed table holds NaN where every grid value of a method diverged on a seed."""
    t = runs_table([0.72, 0.80, 0.90], [0.70, float("nan"), 0.86])
    with pytest.raises(ValueError, match="finite"):
        estimate(t, lead_claim()["quantity"])
    est = estimate(t, {**lead_claim()["quantity"], "drop_nan": True})
    assert est["n"] == 2 and est["ours"] == pytest.approx(3.0)             # seeds 0 and 2: +2 and +4 points
    assert est["ci_low"] == pytest.approx(3.0 - stats.t.ppf(0.975, 1) * math.sqrt(2) / math.sqrt(2))
    with pytest.raises(ValueError, match="every run"):
        estimate(runs_table([0.7], [float("nan")]), {**lead_claim()["quantity"], "drop_nan": True})


def test_summary_tables_use_welch_and_convert_a_population_std():
    summary = pd.DataFrame({"row": ["A", "A"], "column": ["fedpals", "fedavg"], "mean": [80.0, 60.0],
                            "std": [3.0, 4.0], "seeds": [3, 3]})
    q = {"table": "s.csv", "a": {"column": "fedpals"}, "b": {"column": "fedavg"}}
    est = estimate(summary, q)
    assert est["interval"] == "Welch"
    assert (est["ours"], est["ci_low"], est["ci_high"]) == pytest.approx(welch_interval((80, 3, 3), (60, 4, 3)))
    pop = estimate(summary, {**q, "std_ddof": 0})
    s = math.sqrt(3 / 2)
    assert (pop["ci_low"], pop["ci_high"]) == pytest.approx(welch_interval((80, 3 * s, 3), (60, 4 * s, 3))[1:])


def test_one_run_is_inconclusive_unless_exact():
    t = pd.DataFrame({"round": [100, 400], "w_error": [0.5, 4e-6]})
    claim = {"id": "toy", "paper": "agnostic_fedavg", "where": "Fig. 1", "quote": "converges", "paper_value": 0,
             "test": {"op": "at_most", "value": 1e-3},
             "quantity": {"table": "toy.csv", "value": "w_error", "a": {"round": "@max"}}}
    out = evaluate_claims({"p": [claim]}, {"toy.csv": t}, scale="quick")
    assert out.iloc[0]["verdict"] == "inconclusive" and out.iloc[0]["ours"] == pytest.approx(4e-6)
    out = evaluate_claims({"p": [{**claim, "exact": True}]}, {"toy.csv": t}, scale="quick")
    assert out.iloc[0]["verdict"] == "reproduced" and out.iloc[0]["interval"] == "exact"


def test_each_group_gets_its_own_verdict():
    rows = [{"delta": d, "algorithm": a, "mean": m, "std": 0.5, "seeds": 5}
            for d, (fp, fa) in ((0.0, (99.0, 97.0)), (1.0, (95.0, 99.0))) for a, m in (("fedpals", fp), ("fedavg", fa))]
    claim = {"id": "ge", "paper": "fedpals", "where": "Fig. 4", "quote": "better for all", "paper_value": "> 0",
             "test": {"op": "at_least", "value": 0},
             "quantity": {"table": "f.csv", "each": "delta", "a": {"algorithm": "fedpals"},
                          "b": {"algorithm": "fedavg"}}}
    out = evaluate_claims({"fedpals": [claim]}, {"f.csv": pd.DataFrame(rows)}, scale="paper")
    assert list(out["claim"]) == ["ge[delta=0]", "ge[delta=1]"]
    assert list(out["verdict"]) == ["reproduced", "not reproduced"]


def test_rehearsal_gets_no_verdict_and_a_missing_table_is_not_run():
    claims = {"afl": [lead_claim(), {**lead_claim("other.csv"), "id": "other"}]}
    out = evaluate_claims(claims, {"t.csv": runs_table([0.9, 0.91, 0.92], [0.5, 0.5, 0.5])}, scale="rehearsal")
    assert list(out["verdict"]) == ["not judged", "not run"]
    assert out.iloc[0]["ours"] == pytest.approx(41.0)       # still computed, only not judged
    md = claims_markdown(out)
    assert "**not judged**" in md and "“AFL is better.”" in md and "rehearsal scale" in md


@pytest.mark.parametrize("low, high, test, expected", [
    (1.0, 3.0, {"op": "within", "value": 2, "tolerance": 1.5}, "reproduced"),
    (4.0, 5.0, {"op": "within", "value": 2, "tolerance": 1.5}, "not reproduced"),
    (3.0, 4.0, {"op": "within", "value": 2, "tolerance": 1.5}, "inconclusive"),
    (-0.5, -0.1, {"op": "at_least", "value": 0, "tolerance": 1}, "reproduced"),
    (-0.5, 0.0, {"op": "greater", "value": 0}, "not reproduced"),
    (-2.0, -1.0, {"op": "less", "value": 0}, "reproduced"),
    (float("nan"), float("nan"), {"op": "greater", "value": 0}, "inconclusive"),
])
def test_verdict_ops(low, high, test, expected):
    assert verdict(low, high, test) == expected


def test_bad_claims_fail_naming_the_key_path():
    with pytest.raises(ValueError, match=r"claims\.afl\[0\]\.test\.op"):
        validate_claims({"afl": [{**lead_claim(), "test": {"op": "bigger", "value": 0}}]})
    with pytest.raises(ValueError, match=r"claims\.afl\[1\]\.id: duplicate"):
        validate_claims({"afl": [lead_claim(), lead_claim()]})
    bad = {k: v for k, v in lead_claim().items() if k != "quote"}
    with pytest.raises(ValueError, match=r"claims\.afl\[0\]: missing key 'quote'"):
        validate_claims({"afl": [bad]})
    with pytest.raises(ValueError, match="no row matches"):
        estimate(runs_table([0.7], [0.6]), {"a": {"model": "nope"}})


def test_readme_block_is_replaced_and_nothing_else():
    readme = "intro\n<!-- claims:begin (generated) -->\nold 71.5\n<!-- claims:end -->\ntail\n"
    out = rewrite_readme_block(readme, "| new |\n")
    assert out == "intro\n<!-- claims:begin (generated) -->\n| new |\n<!-- claims:end -->\ntail\n"
    with pytest.raises(ValueError, match="exactly one"):
        rewrite_readme_block("no block", "x")


def test_a_named_block_is_replaced_and_the_unnamed_one_kept():
    readme = ("a\n<!-- claims:begin (quick) -->\nold quick\n<!-- claims:end -->\nb\n"
              "<!-- claims[verdicts]:begin (verdicts scale) -->\nold long\n<!-- claims[verdicts]:end -->\nc\n")
    out = rewrite_readme_block(readme, "new long\n", "verdicts")
    assert "old quick" in out and "old long" not in out and "new long\n<!-- claims[verdicts]:end -->" in out
    assert rewrite_readme_block(out, "new quick", "").count("new quick") == 1 and "new long" in out
    with pytest.raises(ValueError, match=r"claims\[other\]"):
        rewrite_readme_block(readme, "x", "other")


def test_cli_renders_claims_csv_for_some_papers_into_a_named_block(tmp_path):
    from fedshift.claims import main

    ge = {"id": "ge", "paper": "fedpals", "where": "Fig. 4", "quote": "better", "paper_value": "> 0",
          "test": {"op": "at_least", "value": 0},
          "quantity": {"table": "f.csv", "a": {"algorithm": "fedpals"}, "b": {"algorithm": "fedavg"}}}
    rows = [{"algorithm": a, "mean": m, "std": 0.5, "seeds": 5} for a, m in (("fedpals", 99.0), ("fedavg", 97.0))]
    out = evaluate_claims({"afl": [lead_claim()], "fedpals": [ge]},
                          {"t.csv": runs_table([0.9, 0.91, 0.92], [0.5, 0.5, 0.5]), "f.csv": pd.DataFrame(rows)},
                          scale="verdicts")
    out.to_csv(tmp_path / "claims.csv", index=False)
    (tmp_path / "claims.md").write_text(claims_markdown(out))
    readme = tmp_path / "README.md"
    readme.write_text("<!-- claims:begin -->\nq\n<!-- claims:end -->\n"
                      "<!-- claims[verdicts]:begin -->\nv\n<!-- claims[verdicts]:end -->\n")
    assert main([str(readme), str(tmp_path / "claims.csv"), "--block", "verdicts"]) == 0
    assert claims_markdown(out) in readme.read_text()                # the csv renders as the md the target wrote
    main([str(readme), str(tmp_path / "claims.csv"), "--block", "verdicts", "--papers", "fedpals"])
    text = readme.read_text()
    assert claims_markdown(out[out.paper == "fedpals"]) in text and "lead" not in text and "\nq\n" in text
    with pytest.raises(ValueError, match="--papers"):
        main([str(readme), str(tmp_path / "claims.md"), "--papers", "fedpals"])
    with pytest.raises(ValueError, match=r"\['wafl'\]"):
        main([str(readme), str(tmp_path / "claims.csv"), "--block", "verdicts", "--papers", "wafl"])


def test_markdown_keeps_one_cell_per_column_and_states_the_test():
    t = pd.DataFrame({"round": [1, 2], "w_error": [0.5, 1e-6]})
    claim = {"id": "toy", "where": "Fig. 1", "quote": "q", "paper_value": 0, "exact": True,
             "test": {"op": "at_most", "value": 1e-3},
             "quantity": {"table": "toy.csv", "description": "|w − w*| at the end", "value": "w_error",
                          "a": {"round": "@max"}}}
    md = claims_markdown(evaluate_claims({"p": [claim]}, {"toy.csv": t}, scale="quick"))
    row = next(line for line in md.splitlines() if line.startswith("| toy "))
    assert row.count(" | ") == 10 and r"\|w − w*\|" in row and "| x ≤ 0.001 |" in row


def test_a_cell_missing_at_this_scale_is_not_run_but_a_bad_table_fails():
    t = runs_table([0.72, 0.73], [0.70, 0.70])
    other = {**lead_claim(), "id": "absent", "quantity": {**lead_claim()["quantity"], "a": {"model": "nope"}}}
    out = evaluate_claims({"afl": [lead_claim(), other]}, {"t.csv": t}, scale="quick")
    assert list(out["verdict"]) == ["inconclusive", "not run"]
    two = pd.concat([t, t.assign(seed=t.seed + 10)])
    with pytest.raises(ValueError, match="summary rows"):
        estimate(two.drop(columns="value").assign(mean=1.0, std=0.0, runs=1),
                 {"a": {"model": "afl"}})


def test_an_inconclusive_verdict_states_the_bound_it_reached():
    afl, uniform = [0.70, 0.74, 0.66, 0.73, 0.69], [0.70, 0.70, 0.69, 0.70, 0.71]
    row = evaluate_claims({"afl": [lead_claim()]}, {"t.csv": runs_table(afl, uniform)}, scale="decisive").iloc[0]
    assert row["verdict"] == "inconclusive"
    lo, hi = f"{row['ci_low']:.2f}", f"{row['ci_high']:.2f}"
    assert row["note"] == f"x within [{lo}, {hi}] points at 5 runs" and float(lo) < 0 < float(hi)
    decided = evaluate_claims({"afl": [lead_claim()]}, {"t.csv": runs_table([0.72, 0.722, 0.718], [0.70] * 3)},
                              scale="decisive").iloc[0]
    assert decided["verdict"] == "reproduced" and decided["note"] == ""
    one = evaluate_claims({"afl": [lead_claim()]}, {"t.csv": runs_table([0.72], [0.70])}, scale="quick").iloc[0]
    assert one["verdict"] == "inconclusive" and one["note"] == "1 run, no interval (x = 2.00 points)"


def test_a_claim_whose_data_the_mirror_lacks_says_so_and_other_gaps_say_why():
    lm = {**lead_claim("lm.csv"), "id": "lm", "data": ["ptb", "cornell_movie_dialogs"]}
    other = {**lead_claim("other.csv"), "id": "other"}
    out = evaluate_claims({"afl": [lm, other]}, {}, scale="decisive", missing_data=["cornell_movie_dialogs"],
                          not_run={"other.csv": "not among claims_papers"})
    assert list(out["verdict"]) == ["needs data: cornell_movie_dialogs", "not run"]
    assert list(out["note"]) == ["not in the data mirror", "not among claims_papers"]
    # with the data present the claim is only not built at this scale, and the note names the scale
    out = evaluate_claims({"afl": [lm]}, {}, scale="quick")
    assert out.iloc[0]["verdict"] == "not run" and out.iloc[0]["note"] == "not built at quick scale"
    md = claims_markdown(evaluate_claims({"afl": [lm, other]}, {}, scale="decisive",
                                         missing_data=["cornell_movie_dialogs"]))
    assert "1 needs data: cornell_movie_dialogs" in md and "**not run** | not built at decisive scale |" in md


def test_the_papers_number_is_checked_against_our_interval():
    t = {"t.csv": runs_table([0.72, 0.73, 0.71], [0.70] * 3)}    # lead 2.0 [−0.48, 4.48]
    row = evaluate_claims({"afl": [lead_claim()]}, t, scale="quick").iloc[0]     # paper_value 1.92
    assert row["paper_in_ci"] == "inside"
    far = {**lead_claim(), "paper_value": 9.0}
    assert evaluate_claims({"afl": [far]}, t, scale="quick").iloc[0]["paper_in_ci"] == "outside"
    text = {**lead_claim(), "paper_value": "> 0 (direction)"}
    assert evaluate_claims({"afl": [text]}, t, scale="quick").iloc[0]["paper_in_ci"] == ""
    claim = {"paper_value": "25 (C=3), 27 (C=2)", "paper_values": [{"group": "C=3 row", "value": 25.3}]}
    assert paper_number(claim, "row=C=3 row") == 25.3 and paper_number(claim, "row=other") is None
    assert paper_number({"paper_values": {"mnist": 33}}, "experiment=mnist") == 33.0
    assert paper_number({"paper_value": 1.5}) == 1.5 and paper_number({"paper_value": True}) is None


def test_boundaries_are_where_the_verdict_changes():
    for test in ({"op": "greater", "value": 1}, {"op": "at_least", "value": 0, "tolerance": 1},
                 {"op": "within", "value": 20, "tolerance": 10}, {"op": "at_most", "value": 0.5, "tolerance": 0.1}):
        for b in boundaries(test):
            assert verdict(b + 0.01, b + 0.02, test) != verdict(b - 0.02, b - 0.01, test)
    assert boundaries({"op": "within", "value": 20, "tolerance": 10}) == [10.0, 30.0]


def test_a_verdict_is_cpu_robust_only_if_the_replication_interval_still_decides():
    test = {"op": "greater", "value": 0}
    assert replication_robust(2.0, 1.0, 3.0, test) is True            # √2-wider: [0.59, 3.41]
    assert replication_robust(2.0, 0.2, 3.8, test) is False           # √2-wider: [−0.55, 4.55]
    assert replication_robust(2.0, -1.0, 5.0, test) is None           # undecided
    t = {"t.csv": runs_table([0.720, 0.721, 0.719], [0.70] * 3)}
    assert evaluate_claims({"afl": [lead_claim()]}, t, scale="quick").iloc[0]["cpu_robust"] == "yes"
    t = {"t.csv": runs_table([0.72, 0.73, 0.74], [0.70] * 3)}       # 3.00 [0.52, 5.48]: √2-wider crosses 0
    row = evaluate_claims({"afl": [lead_claim()]}, t, scale="quick").iloc[0]
    assert row["verdict"] == "reproduced" and row["cpu_robust"] == "could flip"
    assert "could flip on another CPU" in claims_markdown(pd.DataFrame([row]))


def test_the_block_names_scale_config_and_machine(tmp_path):
    import json

    for i, (model, cap) in enumerate((("AMD EPYC", "AVX512"), ("AMD EPYC", "AVX512"), ("Intel Xeon", "AVX2"))):
        f = tmp_path / f"r{i}" / "run.json"
        f.parent.mkdir()
        f.write_text(json.dumps({"environment": {"cpu": {"model": model, "torch_capability": cap},
                                                 "reproducibility": {"portable_cpu": False}}}))
    machine = runs_machine([tmp_path / f"r{i}" / "run.json" for i in range(3)] + [tmp_path / "absent.json"])
    assert machine == "AMD EPYC (AVX512, portable_cpu off): 2 runs; Intel Xeon (AVX2, portable_cpu off): 1 runs"
    out = evaluate_claims({"afl": [lead_claim()]}, {"t.csv": runs_table([0.72, 0.73, 0.71], [0.70] * 3)},
                          scale="decisive", config="config/quick.yaml config/decisive.yaml", machine=machine)
    md = claims_markdown(out)
    head = md.splitlines()[0]
    assert "decisive scale" in head and "`config/quick.yaml config/decisive.yaml`" in head and "Intel Xeon" in head
    row = next(line for line in md.splitlines() if line.startswith("| lead "))
    assert "| 3 | decisive | **inconclusive** | x within [-0.48, 4.48] points at 3 runs; paper's value inside" in row
    out.to_csv(tmp_path / "claims.csv", index=False)
    readme = tmp_path / "README.md"
    readme.write_text("<!-- claims[decisive]:begin -->\nx\n<!-- claims[decisive]:end -->\n")
    from fedshift.claims import main
    main([str(readme), str(tmp_path / "claims.csv"), "--block", "decisive"])
    assert md in readme.read_text()                                  # the csv renders the same block, machine included
