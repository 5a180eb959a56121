"""The preregistered confirmatory design: schema, hash, fresh seeds, seed counts from spread, the judge's refusal."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import yaml
from scipy import stats

from fedshift.claims.design import (
    DesignError,
    DesignMismatchError,
    canonical_form,
    check_design,
    confirmatory_overlay,
    design_hash,
    fresh_seeds,
    load_design,
    require_design,
    reused_seeds,
    seeds_by_key,
    seeds_for_precision,
    used_seeds,
    validate_design,
)

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "config" / "design" / "confirmatory.yaml"


def _claims_config() -> dict:
    claims: dict = {}
    for f in sorted((ROOT / "config" / "papers").glob("*.yaml")):
        claims.update((yaml.safe_load(f.read_text(encoding="utf-8")) or {}).get("claims") or {})
    return claims


@pytest.fixture(scope="module")
def design() -> dict:
    return load_design(DESIGN, claims=_claims_config())


@pytest.fixture(scope="module")
def used() -> dict:
    return used_seeds(ROOT)


def test_committed_design_validates_and_is_a_draft(design):
    assert design["status"] == "draft"
    assert design["multiplicity"]["primary"] == "fdr_bh" and design["multiplicity"]["level"] == 0.05
    assert "holm" in design["multiplicity"]["sensitivity"]
    ids = {c["id"] for c in design["claims"]}
    assert {"fedmm_fig7_scratch_lead", "afl_table1_dlambda_lead"} <= ids


def test_confirmatory_seeds_are_fresh(design, used):
    """Fails if any confirmatory seed was used by an earlier run of the same experiment."""
    assert reused_seeds(design, used) == {}


def test_reuse_is_detected(design, used):
    bad = copy.deepcopy(design)
    key = bad["claims"][0]["settings"]["seeds_key"]
    bad["claims"][0]["seeds"]["list"][0] = min(used[key])
    assert list(reused_seeds(bad, used).values()) == [[min(used[key])]]


def test_used_seeds_holds_every_look_at_fedmm(used):
    # 16 decisive seeds in the snapshot, and the seeds 16-24 the 25-seed start may have reached (16-19 known)
    assert set(range(25)) <= used["fedmm.tasks.digits.seeds"]
    # WAFL's mt->up trained 17 decisive seeds (config/decisive.yaml)
    assert set(range(17)) <= used["wafl.experiments.da_mt_up.seeds"]


def test_seeds_by_key_reads_nested_counts():
    cfg = {"a": {"experiments": {"x": {"seeds": 3}}, "defaults": {"seeds": 2}}, "b": {"seeds": [1, 2]}}
    assert seeds_by_key(cfg) == {"a.experiments.x.seeds": 3, "a.defaults.seeds": 2}


def test_fresh_seeds_skip_used():
    assert fresh_seeds(4, {100, 102}, 100) == [101, 103, 104, 105]
    with pytest.raises(ValueError, match="n must be"):
        fresh_seeds(0, set(), 0)


def test_seeds_for_precision_meets_the_half_width_at_the_upper_sd():
    sd, m, h = 4.0, 10, 2.0
    n = seeds_for_precision(sd, m, h)
    sigma = sd * math.sqrt((m - 1) / stats.chi2.ppf(0.2, m - 1))
    assert stats.t.ppf(0.975, n - 1) * sigma / math.sqrt(n) <= h
    assert stats.t.ppf(0.975, n - 2) * sigma / math.sqrt(n - 1) > h      # the smallest such n
    # more spread, or a narrower target, asks more seeds; the cap holds
    assert seeds_for_precision(8.0, m, h) > n and seeds_for_precision(sd, m, 1.0) > n
    assert seeds_for_precision(100.0, m, 0.1, cap=12) == 12
    with pytest.raises(ValueError, match="half_width"):
        seeds_for_precision(1.0, 5, 0.0)
    with pytest.raises(ValueError, match="sd_runs"):
        seeds_for_precision(1.0, 1, 1.0)


def test_design_seed_counts_do_not_depend_on_a_mean(design):
    """Each row's n follows from its recorded sd and half-width alone; its experiment trains the largest."""
    rule = design["seed_rule"]
    by_key: dict = {}
    for c in design["claims"]:
        s = c["seeds"]
        need = seeds_for_precision(s["sd"], s["sd_runs"], s["half_width"],
                                   sd_upper_confidence=rule["sd_upper_confidence"], cap=rule["cap"])
        assert need <= s["n"]
        by_key.setdefault(c["settings"]["seeds_key"], []).append((need, s["n"]))
    for key, pairs in by_key.items():
        assert max(p[0] for p in pairs) == pairs[0][1], key


def test_hash_is_canonical_and_changes_with_any_value(design):
    reordered = json.loads(json.dumps(design))
    reordered = dict(reversed(list(reordered.items())))
    assert design_hash(reordered) == design_hash(design)
    assert canonical_form(reordered) == canonical_form(design)
    h = design_hash(design)
    assert h.startswith("sha256:") and len(h) == 7 + 64
    changed = copy.deepcopy(design)
    changed["claims"][0]["seeds"]["half_width"] *= 2
    assert design_hash(changed) != h


@pytest.mark.parametrize(("edit", "path"), [
    (lambda d: d["multiplicity"].__setitem__("primary", "bh"), r"multiplicity\.primary"),
    (lambda d: d["claims"][1]["seeds"].__setitem__("n", 1), r"claims\[1\]\.seeds\.n"),
    (lambda d: d["claims"][0]["margin"].pop("source"), r"claims\[0\]\.margin"),
    (lambda d: d.__setitem__("status", "done"), r"status"),
    (lambda d: d["claims"][0]["seeds"]["list"].append(99999), r"claims\[0\]\.seeds\.list"),
])
def test_schema_errors_name_the_key_path(design, edit, path):
    bad = copy.deepcopy(design)
    edit(bad)
    with pytest.raises(DesignError, match=path):
        validate_design(bad)


def test_claims_sharing_an_experiment_must_share_its_seeds(design):
    bad = copy.deepcopy(design)
    keys = [c["settings"]["seeds_key"] for c in bad["claims"]]
    j = next(i for i, k in enumerate(keys) if k in keys[:i])             # the second claim on a shared experiment
    bad["claims"][j]["seeds"]["list"] = [s + 5000 for s in bad["claims"][j]["seeds"]["list"]]
    with pytest.raises(DesignError, match=rf"claims\[{j}\]\.seeds\.list: differs"):
        validate_design(bad)


def test_test_must_match_the_claims_config(design):
    bad = copy.deepcopy(design)
    bad["claims"][0]["test"]["value"] = 123.0
    with pytest.raises(DesignError, match=r"claims\[0\]\.test"):
        validate_design(bad, claims=_claims_config())


def _tree(tmp_path: Path, hashes: list) -> Path:
    for i, h in enumerate(hashes):
        run = tmp_path / "results" / "runs" / "p" / "e" / "r" / f"seed~{i}" / "run.json"
        run.parent.mkdir(parents=True)
        run.write_text(json.dumps({"rounds": 1, **({"design_hash": h} if h else {})}), encoding="utf-8")
    return tmp_path


def test_judge_accepts_runs_of_this_design_and_refuses_a_changed_one(design, tmp_path):
    h = design_hash(design)
    root = _tree(tmp_path, [h, h])
    assert check_design(root, design, allow_draft=True) == h
    changed = copy.deepcopy(design)
    changed["claims"][0]["margin"]["value"] = 2.5          # a margin moved after the runs
    with pytest.raises(DesignMismatchError, match="another design"):
        check_design(root, changed, allow_draft=True)


def test_judge_refuses_unmarked_runs_drafts_and_nothing(design, tmp_path):
    h = design_hash(design)
    with pytest.raises(DesignMismatchError, match="record no design_hash"):
        check_design([{"design_hash": h}, {"run": "afl/x/seed~0"}], design, allow_draft=True)
    with pytest.raises(DesignMismatchError, match="status 'draft'"):
        check_design([{"design_hash": h}], design)
    with pytest.raises(DesignMismatchError, match="no runs"):
        check_design(tmp_path, design, allow_draft=True)


def test_overlay_carries_hash_and_seed_lists(design):
    overlay = confirmatory_overlay(design)
    assert overlay["design_hash"] == design_hash(design)
    c = design["claims"][0]
    node = overlay
    for part in c["settings"]["seeds_key"].split("."):
        node = node[part]
    assert node == c["seeds"]["list"]


def test_the_workflow_starts_only_under_the_committed_final_design(design, tmp_path):
    path = tmp_path / "confirmatory.yaml"
    path.write_text(yaml.safe_dump(design), encoding="utf-8")
    with pytest.raises(DesignMismatchError, match="status 'draft'"):
        require_design(design_hash(design), path)
    final = {**copy.deepcopy(design), "status": "final"}
    path.write_text(yaml.safe_dump(final), encoding="utf-8")
    assert require_design(design_hash(final), path) == final
    with pytest.raises(DesignMismatchError, match="not the committed design's hash"):
        require_design(design_hash(design), path)                      # the draft's hash: another design


def test_a_draft_design_is_what_the_draft_generator_writes(design, tmp_path):
    """While the design is a draft, its every number comes from benchmarks/design_draft.py (committed files only)."""
    if design["status"] != "draft":
        pytest.skip("the final design is the lead's, edited by hand")
    import subprocess
    import sys

    out = tmp_path / "draft.yaml"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "design_draft.py"), "--out", str(out)], check=True,
                   cwd=ROOT)
    assert yaml.safe_load(out.read_text(encoding="utf-8")) == design
