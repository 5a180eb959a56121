"""The pinned environments: the pip lock pins every package exactly and covers every direct requirement,
the conda env file is usable by `--sdm conda` (it parses, and what it names exists), and the running
environment is the locked one for the packages that decide results and the cluster path."""

from importlib.metadata import version
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ENVS = Path(__file__).resolve().parents[2] / "envs"


def _lock() -> dict[str, str]:
    pins = {}
    for line in (ENVS / "requirements.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, sep, ver = line.partition("==")
        assert sep and ver and " " not in ver, f"not an exact pin: {line!r}"
        pins[canonicalize_name(name)] = ver
    return pins


def test_lock_pins_every_direct_requirement_exactly():
    pins = _lock()
    assert len(pins) > 100
    for raw in (ENVS / "requirements.in").read_text().splitlines():
        line = raw.split(" #", 1)[0].strip()  # pip allows comments after a requirement
        if line and not line.startswith("#"):
            req = Requirement(line)
            name = canonicalize_name(req.name)
            assert name in pins, f"{req.name} of requirements.in is not in the lock"
            assert req.specifier.contains(pins[name], prereleases=True), (line, pins[name])


def test_conda_env_file_parses_and_names_what_exists():
    env = yaml.safe_load((ENVS / "fedshift.yaml").read_text())
    deps = env["dependencies"]
    assert "python=3.11" in deps and "pip" in deps and env["channels"][0] == "conda-forge"
    pip = next(d["pip"] for d in deps if isinstance(d, dict))
    # conda runs the pip section from the env file's folder
    assert "-r requirements.txt" in pip and (ENVS / "requirements.txt").is_file()
    assert "-e .." in pip and (ENVS.parent / "pyproject.toml").is_file()
    # every rule's `conda:` directive points at this file (ENV in common.smk, relative to workflow/rules)
    common = (ENVS.parent / "workflow/rules/common.smk").read_text()
    assert 'ENV = "../../envs/fedshift.yaml"' in common
    assert (ENVS.parent / "workflow/rules" / "../../envs/fedshift.yaml").resolve() == ENVS / "fedshift.yaml"


@pytest.mark.parametrize("name", ["torch", "numpy", "pandas", "snakemake", "snakemake-executor-plugin-slurm",
                                  "snakemake-executor-plugin-slurm-jobstep", "dvc", "tqdm"])
def test_running_environment_is_the_lock(name):
    assert version(name) == _lock()[canonicalize_name(name)], f"{name}: install envs/requirements.txt (bin/setup)"
