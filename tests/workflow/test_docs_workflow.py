"""The target `docs` (workflow/rules/docs.smk): a small run's tables and figures rendered into the site's results
pages, marked as not a result at smoke scale, every figure published, and nothing to do on a rerun."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from test_workflow import SNAKEMAKE, run

pytestmark = pytest.mark.workflow


def test_the_docs_target_builds_the_site_from_a_small_run(copy_repo, mirror_dir, tmp_path):
    repo = copy_repo(tmp_path / "repo")
    args = [*SNAKEMAKE, "--cores", "2", "docs", "--configfile", "tests/workflow/smoke.yaml", "--config",
            f"data_mirror={mirror_dir}", "default_papers=afl", "claims_papers=afl"]
    run(args, repo)
    site = repo / "results" / "site"
    afl = (site / "papers" / "afl" / "index.html").read_text()
    assert "SMOKE — not a result" in afl  # a smoke run is marked, never shown as a result
    figures = sorted((repo / "results" / "figures" / "afl").glob("*.png"))
    assert figures
    for png in figures:
        assert (site / "generated" / "figures" / "afl" / png.name).read_bytes() == png.read_bytes()
        assert f"generated/figures/afl/{png.name}" in afl
    table = pd.read_csv(repo / "results" / "tables" / "afl" / "table1_adult.csv")
    assert "table1_adult.csv" in afl and table.shape[0] > 0
    verdicts = (site / "results" / "verdicts" / "index.html").read_text()
    claims = pd.read_csv(repo / "results" / "tables" / "claims.csv")
    assert all(c in verdicts for c in claims.loc[claims.paper == "afl", "claim"])
    assert re.search(r"not judged", verdicts)
    assert "Nothing to be done" in run([*args, "-n"], repo).stdout
