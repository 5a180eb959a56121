"""Workflow conventions: `snakefmt --check` and `snakemake --lint` are clean (both in CI), and the catalog files
(.snakemake-workflow-catalog.yml, config/README.md) are present and current."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_snakefmt_check_is_clean():
    proc = subprocess.run([str(BIN / "snakefmt"), "--check", "workflow"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # run `snakefmt workflow` to fix


@pytest.mark.workflow
def test_lint_is_clean_on_the_paper_and_quick_configs(copy_repo, tmp_path):
    repo = copy_repo(tmp_path / "repo")
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    for extra in ([], ["--configfile", "config/quick.yaml"]):  # data_mirror "": nothing to check
        proc = subprocess.run([str(BIN / "snakemake"), "--lint", *extra],
                              cwd=repo, capture_output=True, text=True, timeout=600, env=env)
        assert proc.returncode == 0 and "Congratulations, your workflow is in a good condition!" in proc.stdout + \
            proc.stderr, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_catalog_files_describe_this_workflow():
    catalog = yaml.safe_load((ROOT / ".snakemake-workflow-catalog.yml").read_text())
    usage = catalog["usage"]
    assert set(usage) == {"mandatory-flags", "software-stack-deployment", "report"}
    assert usage["software-stack-deployment"]["conda"] is True and usage["report"] is True
    readme = (ROOT / "config" / "README.md").read_text()
    for f in sorted((ROOT / "config").rglob("*.yaml")):  # every config file is described, or its generated folder
        rel = f.relative_to(ROOT / "config")
        assert f"`{rel.as_posix()}`" in readme or f"`{rel.parent.as_posix()}/`" in readme, f


def test_the_catalog_layout_draws_its_rule_graph_from_the_test_config(copy_repo, tmp_path):
    """workflow/Snakefile is the main workflow and .test/config/config.yaml its test configuration (the catalog's
    standardized usage): `snakemake --directory .test --rulegraph` draws the rule graph of AFL's smoke run."""
    repo = copy_repo(tmp_path / "repo")
    assert not (repo / "Snakefile").exists() and (repo / "workflow" / "Snakefile").is_file()
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    proc = subprocess.run([str(BIN / "snakemake"), "--directory", ".test", "--rulegraph"], cwd=repo,
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    graph = proc.stdout[proc.stdout.index("digraph"):]
    rules = set(re.findall(r'label = "([a-z0-9_]+)"', graph))
    assert {"all", "claims", "afl_table1", "paper_train_afl_afl_adult", "download_adult"} <= rules, rules
    assert not any(r.startswith(("paper_train_fedpals", "paper_train_wafl")) for r in rules), rules  # AFL only
    # the test configuration overlays the repository's: its scale reaches the plan
    proc = subprocess.run([str(BIN / "snakemake"), "--directory", ".test", "-n", "--config", "scale=rehearsal"],
                          cwd=repo, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0 and "paper_train_afl_afl_adult" in proc.stdout + proc.stderr
