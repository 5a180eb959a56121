"""Claims as data (fedshift.claims): intervals, verdicts on constructed tables, README block rewriting."""

import math
import re

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fedshift.claims import (
    boundaries,
    claims_markdown,
    config_label,
    estimate,
    evaluate_claims,
    machines_text,
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
    row = next(line for line in md.splitlines() if "| toy |" in line)
    assert row.startswith("| 🟢 **reproduced** | toy | ")
    assert len(re.split(r"(?<!\\)\|", row)) == 2 + 8                       # 8 cells: no "|" inside one ends it
    assert "| 1 | exact | – | <details>" in row                          # exact: no test; no work stated: –
    assert r"\|w − w*\|" in row and "<summary>Fig. 1 · x ≤ 0.001</summary>" in row


def test_the_table_puts_the_verdict_first_and_the_quote_in_an_expandable_cell():
    claims = {"afl": [lead_claim()], "wafl": [{**lead_claim(), "id": "w", "quote": "WAFL <wins> | always"}]}
    t = {"t.csv": runs_table([0.72, 0.721, 0.719], [0.70] * 3)}
    md = claims_markdown(evaluate_claims(claims, t, scale="decisive"))
    lines = md.splitlines()
    header = next(line for line in lines if line.startswith("| verdict"))
    assert header == "| verdict | claim | ours [95 % CI] | paper's value | runs | p · BH · Holm | work | details |"
    assert header.count("paper") == 1                                      # the header does not repeat "paper"
    assert lines.count(header) == 2 and "**afl**" in lines and "**wafl**" in lines      # one table per paper
    row = next(line for line in lines if "| w |" in line)
    assert row.startswith("| 🟢 **reproduced** | w | 2.00 [1.75, 2.25] | 1.92 | 3 | ")
    assert " | – | <details><summary>Table 1 · x &gt; 0" in row            # no work stated: "–"
    assert "“WAFL &lt;wins&gt; \\| always”</details> |" in row             # escaped: no tag, no cell break
    assert "“AFL is better.”" in md and "Quoted claims" not in md


def test_every_verdict_has_its_colour_and_a_could_flip_row_its_mark():
    from fedshift.claims import MARKS, verdict_mark

    assert set(MARKS) == {"reproduced", "smaller than claimed", "equivalent to zero", "not reproduced", "inconclusive"}
    assert len(set(MARKS.values())) == 5
    assert verdict_mark("smaller than claimed") == "🟠 **smaller than claimed**"
    assert verdict_mark("reproduced", could_flip=True) == "🟢 **reproduced** †"
    assert verdict_mark("not run") == "**not run**"


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
    assert "1 needs data: cornell_movie_dialogs" in md
    assert "| **not run** | other | – | 1.92 | 0 | – | – | <details>" in md and "not built at decisive scale" in md


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


def test_a_table_merged_from_two_claims_jobs_names_the_papers_of_each_machine_text():
    one = "Intel Xeon (AVX512, portable_cpu off): 540 runs"
    t = pd.DataFrame({"paper": ["afl", "wafl", "fedmm", "fedmm"], "machine": [one, one, one.replace("540", "112"), ""]})
    assert machines_text(t) == ("Intel Xeon (AVX512, portable_cpu off): 112 runs (fedmm); "
                                "Intel Xeon (AVX512, portable_cpu off): 540 runs (afl, wafl)")
    assert machines_text(t[t["paper"] == "afl"]) == one  # one job: its own text, no paper list
    assert machines_text(t.drop(columns="machine")) == ""
    second = t.assign(second_machine=["X (DEFAULT, portable_cpu on): 8 runs", "", "", ""])
    assert machines_text(second, "second_machine") == "X (DEFAULT, portable_cpu on): 8 runs (afl)"
    every = second.assign(second_machine="X (DEFAULT, portable_cpu on): 8 runs", second_n=[3, 3, 0, 0])
    assert machines_text(every, "second_machine") == "X (DEFAULT, portable_cpu on): 8 runs (afl, wafl)"  # computed
    assert "540 runs (afl, wafl)" in claims_markdown(
        evaluate_claims({"afl": [lead_claim()]}, {"t.csv": runs_table([0.72, 0.73, 0.71], [0.70] * 3)}, scale="quick")
        .pipe(lambda out: pd.concat([out.assign(machine=one), out.assign(paper="wafl", machine=one),
                                     out.assign(paper="fedmm", machine=one.replace("540", "112"))])))


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
    row = next(line for line in md.splitlines() if "| lead |" in line)
    assert row.startswith("| ⚪ **inconclusive** | lead | 2.00 [-0.48, 4.48] | 1.92 | 3 | ")
    assert row.split(" | ")[5].count("·") == 2 and " | – | <details>" in row    # p · BH · Holm; no work stated
    assert "x within [-0.48, 4.48] points at 3 runs; paper's value inside our interval." in row
    out.to_csv(tmp_path / "claims.csv", index=False)
    readme = tmp_path / "README.md"
    readme.write_text("<!-- claims[decisive]:begin -->\nx\n<!-- claims[decisive]:end -->\n")
    from fedshift.claims import main
    main([str(readme), str(tmp_path / "claims.csv"), "--block", "decisive"])
    assert md in readme.read_text()                                  # the csv renders the same block, machine included


# --- verdicts on the effect's size (issue 47): reproduced / smaller than claimed / equivalent to zero ---------------

GREATER0 = {"op": "greater", "value": 0}
AROUND20 = {"op": "within", "value": 20, "tolerance": 10}                 # FedMM's "around 20 %"


@pytest.mark.parametrize("low, high, test, paper, effect, expected, direction", [
    # the examples: WAFL Table 2 mt→mm at 8 seeds against the paper's +2.52 ...
    (-0.15, 0.10, GREATER0, 2.52, {"margin": 0.5}, "equivalent to zero", "inconclusive"),
    (-0.15, 0.10, GREATER0, 2.52, {"margin": None}, "smaller than claimed", "inconclusive"),
    # ... and WAFL over FedFGSM at quick settings against the paper's +8
    (-1.8, 1.9, GREATER0, 8.0, {"margin": 1.0}, "smaller than claimed", "inconclusive"),
    (-1.8, 1.9, GREATER0, 1.5, {"margin": 1.0}, "inconclusive", "inconclusive"),          # holds 0 and 1.5
    # direction only: a larger effect than the paper's, or a smaller one of the right sign, is reproduced
    (8.69, 9.45, GREATER0, 3.3, {"margin": 0.5}, "reproduced", "reproduced"),
    (0.10, 0.30, GREATER0, 2.52, {"margin": 0.5}, "reproduced", "reproduced"),
    # a claim that states its size: within the tolerance, or short of it
    (29.07, 29.93, GREATER0, 33.0, {"margin": 1, "size_tolerance": 5}, "reproduced", "reproduced"),
    (29.07, 29.93, GREATER0, 33.0, {"margin": 1, "size_tolerance": 3}, "smaller than claimed", "reproduced"),
    (29.07, 29.93, GREATER0, 33.0, {"margin": 1, "size_tolerance": "25%"}, "reproduced", "reproduced"),   # 33 − 8.25
    (29.07, 29.93, GREATER0, 40.0, {"margin": 1, "size_tolerance": "25%"}, "smaller than claimed", "reproduced"),
    (0.10, 0.30, GREATER0, 2.52, {"margin": 0.5, "size_tolerance": 1}, "equivalent to zero", "reproduced"),
    # the other side of 0 stays not reproduced, even inside the margin: a decided direction is kept
    (-5.78, -2.62, GREATER0, 1.92, {"margin": 0.5}, "not reproduced", "not reproduced"),
    (-0.4, -0.1, GREATER0, 1.92, {"margin": 0.5}, "not reproduced", "not reproduced"),
    # the equivalence margin is open: an end on it is not inside
    (-0.5, 0.3, GREATER0, 2.52, {"margin": 0.5}, "smaller than claimed", "inconclusive"),
    (-0.49, 0.3, GREATER0, 2.52, {"margin": 0.5}, "equivalent to zero", "inconclusive"),
    # FedMM's band: short of it but positive is smaller than claimed; below 0 or above the band not reproduced
    (12.0, 28.0, AROUND20, 20.0, {"margin": 5, "size_tolerance": 10}, "reproduced", "reproduced"),
    (2.0, 8.0, AROUND20, 20.0, {"margin": 5, "size_tolerance": 10}, "smaller than claimed", "not reproduced"),
    (-6.0, 4.0, AROUND20, 20.0, {"margin": 5, "size_tolerance": 10}, "smaller than claimed", "not reproduced"),
    (-4.0, 4.0, AROUND20, 20.0, {"margin": 5, "size_tolerance": 10}, "equivalent to zero", "not reproduced"),
    (-9.0, -6.0, AROUND20, 20.0, {"margin": 5, "size_tolerance": 10}, "not reproduced", "not reproduced"),
    (32.0, 40.0, AROUND20, 20.0, {"margin": 5, "size_tolerance": 10}, "not reproduced", "not reproduced"),
    (-107.5, 110.0, AROUND20, 20.0, {"margin": 5, "size_tolerance": 10}, "inconclusive", "inconclusive"),
    # a negative claimed effect (e.g. a loss that should fall): the near side of −3 is above it
    (-1.0, 0.5, {"op": "less", "value": 0}, -3.0, {"margin": None}, "smaller than claimed", "inconclusive"),
    # no number from the paper: the direction alone, and equivalence
    (-0.2, 0.2, GREATER0, None, {"margin": 0.5}, "equivalent to zero", "inconclusive"),
    (-0.2, 0.9, GREATER0, None, {"margin": 0.5}, "inconclusive", "inconclusive"),
    (float("nan"), float("nan"), GREATER0, 2.0, {"margin": 0.5}, "inconclusive", "inconclusive"),
])
def test_effect_verdicts_on_exact_intervals(low, high, test, paper, effect, expected, direction):
    from fedshift.claims import effect_verdict

    assert effect_verdict(low, high, test, paper, effect) == expected
    assert verdict(low, high, test) == direction                           # today's direction test, beside it


def test_inconclusive_only_where_the_interval_is_wider_than_every_decision():
    """Over a grid of intervals: inconclusive ⇔ holds the test's boundary, reaches the paper's value, leaves (−m, m)."""
    from fedshift.claims import effect_verdict

    p, m = 2.52, 0.5
    ends = np.round(np.arange(-4.0, 6.01, 0.25), 2)
    for lo in ends:
        for hi in ends[ends >= lo]:
            v = effect_verdict(lo, hi, GREATER0, p, {"margin": m})
            wide = lo <= 0 <= hi and hi >= p and not (-m < lo and hi < m)
            assert (v == "inconclusive") == bool(wide), (lo, hi, v)


def test_evaluated_rows_carry_verdict_direction_note_and_effect():
    table2 = pd.DataFrame({"column": ["mt_mm"] * 8, "seed": range(8), "algorithm": "WAFL − FedAvg",
                           "value": values_with(-0.025, 0.15, 8)})
    claim = {"id": "t2", "where": "Table 2", "quote": "q", "paper_value": "+2.52 (mt→mm)",
             "paper_values": {"mt_mm": 2.52}, "test": GREATER0,
             "effect": {"margin": 0.5, "reason": "half a point, below the smallest lead (0.86)"},
             "quantity": {"table": "t2.csv", "description": "WAFL − FedAvg (points)", "each": "column",
                          "a": {"algorithm": "WAFL − FedAvg"}}}
    row = evaluate_claims({"wafl": [claim]}, {"t2.csv": table2}, scale="decisive").iloc[0]
    assert -0.5 < row["ci_low"] < 0 < row["ci_high"] < 0.5
    assert (row["verdict"], row["direction"], row["claimed"]) == ("equivalent to zero", "inconclusive", 2.52)
    assert row["note"] == "within ±0.5 points of 0 (margin: half a point, below the smallest lead (0.86))"
    assert row["effect"] == "equivalence margin ±0.5 (half a point, below the smallest lead (0.86))"
    no_margin = {**claim, "effect": {"margin": None, "reason": "r"}}
    row = evaluate_claims({"wafl": [no_margin]}, {"t2.csv": table2}, scale="decisive").iloc[0]
    assert (row["verdict"], row["note"]) == ("smaller than claimed", "interval short of the paper's 2.52 points")
    assert "(alone: inconclusive)" in claims_markdown(pd.DataFrame([row]))


def values_with(mean, sd, n):
    z = np.linspace(-1.0, 1.0, n)
    z = (z - z.mean()) / z.std(ddof=1)
    return mean + sd * z


def test_cpu_robustness_judges_the_effect_verdict():
    from fedshift.claims import replication_robust

    # smaller than claimed at [1, 3] against 8 (tolerance 2): √2-wider [0.59, 3.41] still short of 6
    assert replication_robust(2.0, 1.0, 3.0, GREATER0, 8.0, {"margin": None, "size_tolerance": 2}) is True
    # equivalent to zero at [−0.3, 0.3] within ±0.4: √2-wider [−0.42, 0.42] leaves it
    assert replication_robust(0.0, -0.3, 0.3, GREATER0, 2.5, {"margin": 0.4}) is False


@pytest.mark.parametrize("effect, paper, test, match", [
    ({"margin": 3.0, "reason": "r"}, 2.52, GREATER0, r"claims\.wafl\[0\]\.effect\.margin: 3 is not below .* 2\.52"),
    ({"margin": 0.5, "reason": "r"}, 2.52, {"op": "at_least", "value": 0, "tolerance": 1},
     r"effect\.margin: 0 satisfies the claim's test \(x ≥ 0 − 1\)"),
    ({"margin": 0.5}, 2.52, GREATER0, r"effect\.reason: the reason"),
    ({"margin": 0.5, "reason": " "}, 2.52, GREATER0, r"effect\.reason"),
    ({"reason": "r"}, 2.52, GREATER0, r"effect: missing key 'margin'"),
    ({"margin": 0, "reason": "r"}, 2.52, GREATER0, r"effect\.margin: 0 is not a number > 0"),
    ({"margin": 0.5, "reason": "r", "tolerance": 1}, 2.52, GREATER0, r"effect: unknown key\(s\) \['tolerance'\]"),
    ({"margin": 0.5, "reason": "r", "size_tolerance": -1}, 2.52, GREATER0, r"effect\.size_tolerance: .*-1"),
    ({"margin": 0.5, "reason": "r", "size_tolerance": "a lot"}, 2.52, GREATER0, r"size_tolerance: .*'25%'"),
    ({"margin": 0.5, "reason": "r", "size_tolerance": 1}, "> 0", GREATER0, r"size_tolerance: the claim states no"),
])
def test_a_bad_effect_fails_naming_its_key_path(effect, paper, test, match):
    claim = {**lead_claim(), "paper_value": paper, "test": test, "effect": effect}
    with pytest.raises(ValueError, match=match):
        validate_claims({"wafl": [claim]})


def test_a_margin_must_be_below_every_groups_paper_value():
    claim = {**lead_claim(), "paper_value": "per task", "paper_values": {"a": 2.52, "b": 0.4},
             "effect": {"margin": 0.5, "reason": "r"}}
    with pytest.raises(ValueError, match=r"0\.5 is not below the paper's value 0\.4"):
        validate_claims({"wafl": [claim]})
    validate_claims({"wafl": [{**claim, "effect": {"margin": 0.3, "reason": "r"}}]})


def test_every_configured_claim_states_its_margin_and_reason():
    """config/papers/*.yaml: each judged claim carries `effect` (margin or null, and why), and all validate."""
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[2]
    claims = {}
    for f in sorted((root / "config" / "papers").glob("*.yaml")):
        claims.update((yaml.safe_load(f.read_text()) or {}).get("claims", {}))
    validate_claims(claims)
    assert len(claims) == 5
    for paper, items in claims.items():
        for c in items:
            if c.get("status"):                # no table, no test: the reason it has no verdict instead
                assert c["reason"].strip() and "effect" not in c, c["id"]
                continue
            if c.get("exact"):
                continue
            assert c.get("effect", {}).get("reason", "").strip(), f"{c['id']}: effect.reason"
            assert "margin" in c["effect"], c["id"]


# --- the second run's verdicts (another instruction set) --------------------------------------------------------------


def _two_runs():
    claims = {"afl": [lead_claim(), {**lead_claim(), "id": "gap", "effect": {"margin": 0.5, "reason": "r"}},
                      {**lead_claim("absent.csv"), "id": "absent"}]}
    first = evaluate_claims(claims, {"t.csv": runs_table([0.72, 0.721, 0.719], [0.70] * 3)}, scale="decisive",
                            machine="AMD EPYC (AVX512, portable_cpu off): 6 runs")
    second = evaluate_claims(claims, {"t.csv": runs_table([0.72, 0.73, 0.74, 0.70], [0.70] * 4)},
                             scale="decisive", machine="AMD EPYC (DEFAULT, portable_cpu on): 8 runs")
    return first, second


def test_a_second_run_adds_its_verdict_and_the_agreement():
    from fedshift.claims import agreement_counts, compare_runs

    first, second = _two_runs()
    out = compare_runs(first, second.iloc[::-1])                         # matched by claim, not by order
    assert list(out["verdict"]) == ["reproduced", "reproduced", "not run"]
    assert list(out["second_verdict"]) == ["inconclusive", "inconclusive", "not run"]
    assert list(out["agreement"]) == ["different", "different", ""]       # a row not computed compares nothing
    assert out.loc[0, "second_ours"] == pytest.approx(2.25) and out.loc[0, "second_n"] == 4
    assert set(out["second_machine"]) == {"AMD EPYC (DEFAULT, portable_cpu on): 8 runs"}
    assert agreement_counts(out) == {"compared": 2, "same": 0, "decided": 2, "kept": 0}
    same = compare_runs(first, first)
    assert agreement_counts(same) == {"compared": 2, "same": 2, "decided": 2, "kept": 2}
    with pytest.raises(ValueError, match="different scales"):
        compare_runs(first, second.assign(scale="quick"))
    with pytest.raises(ValueError, match="repeat rows"):
        compare_runs(first, pd.concat([second, second]))


def test_the_table_shows_the_second_verdict_the_agreement_and_each_disagreement():
    from fedshift.claims import compare_runs

    first, second = _two_runs()
    md = claims_markdown(compare_runs(first, second))
    assert "| verdict | claim | ours [95 % CI] | paper's value | runs | 2nd run | p · BH · Holm | work | details |" in md
    row = next(line for line in md.splitlines() if "| lead |" in line)
    assert row.startswith("| 🟢 **reproduced** | lead | 2.00 [1.75, 2.25] | 1.92 | 3 | ⚪ **inconclusive** | ")
    assert ("**2nd run** (AMD EPYC (DEFAULT, portable_cpu on): 8 runs (afl)): 0 of 2 rows compared have the same "
            "verdict; "
            "0 of 2 decided rows keep theirs.") in md
    assert "- lead: 2.00 [1.75, 2.25] at 3 runs, **reproduced**; 2nd run 2.25 [" in md
    assert "2nd run" not in claims_markdown(first)                         # no second run: no column


def test_cli_renders_a_second_runs_verdicts_beside(tmp_path):
    from fedshift.claims import compare_runs, main, read_claims_csv

    first, second = _two_runs()
    first.to_csv(tmp_path / "claims.csv", index=False)
    second.to_csv(tmp_path / "portable.csv", index=False)
    readme = tmp_path / "README.md"
    readme.write_text("<!-- claims:begin -->\nx\n<!-- claims:end -->\n")
    assert main([str(readme), str(tmp_path / "claims.csv"), "--second", str(tmp_path / "portable.csv")]) == 0
    back = read_claims_csv(tmp_path / "claims.csv")
    assert claims_markdown(compare_runs(back, read_claims_csv(tmp_path / "portable.csv"))) in readme.read_text()
    assert "| 2nd run |" in readme.read_text()
    (tmp_path / "claims.md").write_text("y")
    with pytest.raises(ValueError, match="--second need claims.csv"):
        main([str(readme), str(tmp_path / "claims.md"), "--second", str(tmp_path / "portable.csv")])


def test_the_readme_counts_block_states_the_second_runs_agreement():
    from fedshift import docsgen
    from fedshift.claims import compare_runs

    first, second = _two_runs()
    text = docsgen.verdict_counts_markdown(compare_runs(first, first.assign(machine="Xeon (DEFAULT): 6 runs")))
    # lead and gap hold the same data: one comparison, counted once (and said so)
    assert "| paper | seeds | reproduced | not run |" in text and "| afl | 3 | 1 | 1 |" in text
    assert "1 rows that repeat an earlier row's data are not counted again" in text
    assert text.rstrip().endswith("Second run (Xeon (DEFAULT): 6 runs (afl)): 2 of 2 rows compared have the same "
                                  "verdict; 2 of 2 decided rows keep theirs.")
    assert "Second run" not in docsgen.verdict_counts_markdown(first)


def test_the_config_column_names_overlays_by_repository_path_and_never_a_machine_path(tmp_path):
    root = tmp_path / "repo"
    (root / "config").mkdir(parents=True)
    outside = tmp_path / "scratch" / "fedmm10.yaml"
    label = config_label([str(root / "config" / "quick.yaml"), "config/decisive.yaml", str(outside)], str(root))
    assert label == "config/quick.yaml config/decisive.yaml fedmm10.yaml (outside the repository)"
    assert str(tmp_path) not in label
    # a sibling folder whose name starts with the root's is outside too
    assert config_label([str(tmp_path / "repo2" / "x.yaml")], str(root)) == "x.yaml (outside the repository)"
    assert config_label([], str(root)) == "config/config.yaml"
