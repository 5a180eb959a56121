"""fedshift.validation.snakemake_api: the Snakemake versions the workflow's uses of Snakemake internals are known to
work on are stated once (the code's constant; pyproject's extra and requirements.in say the same range), the running
Snakemake is one of them, another version stops the workflow at its start by name, and the parameter override
(inspected_once) is what Snakemake reads."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

import snakemake
from fedshift.validation import SNAKEMAKE_VERSIONS, UnsupportedSnakemake, check_snakemake_version, inspected_once

ROOT = Path(__file__).resolve().parents[2]


def test_the_running_snakemake_is_a_supported_version():
    assert check_snakemake_version() == snakemake.__version__


@pytest.mark.parametrize("version", ["9.11.9", "9.28.0", "10.0.0", "8.30.0", "not-a-version"])
def test_an_unsupported_snakemake_fails_naming_its_version_and_the_range(monkeypatch, version):
    monkeypatch.setattr(snakemake, "__version__", version)
    with pytest.raises(UnsupportedSnakemake) as err:
        check_snakemake_version()
    assert f"Snakemake {version} is not a supported version ({SNAKEMAKE_VERSIONS})" in str(err.value)


@pytest.mark.parametrize("version", ["9.12.0", "9.20.0", "9.27.1"])
def test_the_versions_known_to_work_pass(monkeypatch, version):
    monkeypatch.setattr(snakemake, "__version__", version)
    assert check_snakemake_version() == version


def test_pyproject_and_requirements_state_the_codes_range():
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["workflow"]
    lines = [line.split(" #", 1)[0].strip() for line in (ROOT / "envs/requirements.in").read_text().splitlines()]
    pinned = [Requirement(line) for line in lines if line.startswith("snakemake") and "plugin" not in line]
    stated = [Requirement(r) for r in extra] + pinned
    assert [r.name for r in stated] == ["snakemake", "snakemake"]
    assert {r.specifier for r in stated} == {SpecifierSet(SNAKEMAKE_VERSIONS)}
    for page in ("snakemake.md", "environments.md"):  # the pages that name the range name the code's
        text = (ROOT / "docs" / "concepts" / page).read_text()
        assert f"`{SNAKEMAKE_VERSIONS}`" in text.replace("**", ""), page


def test_the_workflow_stops_at_its_start_on_an_unsupported_snakemake(tmp_path):
    """The real Snakefile, run by a Snakemake that says it is 9.28.0: it stops before reading any config file."""
    code = ("import sys, snakemake; snakemake.__version__ = '9.28.0'; from snakemake.cli import main; "
            f"main(['-n', '--cores', '1', '--snakefile', {str(ROOT / 'workflow' / 'Snakefile')!r}])")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert f"fedshift: Snakemake 9.28.0 is not a supported version ({SNAKEMAKE_VERSIONS})" in proc.stderr


def test_inspected_once_is_the_parameter_list_snakemake_reads():
    from snakemake.common import get_function_params

    def inputs(wildcards, input, threads=1):
        return []

    class Jobs:
        def params(self, wildcards):
            return {}

    assert inspected_once(inputs) is inputs
    assert list(get_function_params(inputs)) == ["wildcards", "input", "threads"]
    bound = Jobs().params
    assert inspected_once(bound) is bound
    # the bound method's own parameters (no `self`), recorded on its function: the same for every instance
    assert list(get_function_params(Jobs().params)) == ["wildcards"]
    assert inspected_once(4096) == 4096  # a resource every job shares is its value
