"""Workflow conventions: `snakefmt --check` and `snakemake --lint` are clean (both in CI), and the catalog files
(.snakemake-workflow-catalog.yml, config/README.md) are present and current."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_snakefmt_check_is_clean():
    proc = subprocess.run([str(BIN / "snakefmt"), "--check", "Snakefile", "workflow"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # run `snakefmt Snakefile workflow` to fix


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
    for f in sorted((ROOT / "config").rglob("*.yaml")):  # every config file is described
        assert f"`{f.relative_to(ROOT / 'config').as_posix()}`" in readme, f
