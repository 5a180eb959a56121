"""fedshift.validation.add_config_file: the workflow's config files handed to Snakemake already parsed give the
config that Snakemake's own ``configfile:`` directive gives, command-line values still winning."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SNAKEFILE = """
import json, os
from fedshift.validation import add_config_file, check_yaml_file

for f in ["base.yaml", "paper.yaml"]:
    if os.environ["HOW"] == "directive":
        workflow.configfile(f)  # what `configfile: f` compiles to
    else:
        add_config_file(workflow, f, check_yaml_file(f))
with open(os.environ["OUT"], "w") as fh:
    json.dump({"config": config, "configfiles": [str(f) for f in workflow.configfiles]}, fh, sort_keys=True)

rule all:
    output: "never"
    shell: "touch {output}"
"""


@pytest.mark.parametrize("cli", [
    [],
    ["--configfile", "overlay.yaml"],
    ["--configfile", "overlay.yaml", "--config", "scale=quick", 'paper={"train": {"rounds": 7}}'],
    ["--replace-workflow-config", "--config", "scale=quick"],  # add_config_file hands over to the directive
])
def test_parsed_config_files_give_the_directives_config(tmp_path, cli):
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    (tmp_path / "base.yaml").write_text("scale: paper\nthreads_per_job: 1\npaper: {train: {rounds: 100, lr: 0.1}}\n")
    (tmp_path / "paper.yaml").write_text("paper:\n  train: {lr: 0.05, batch: [32, 64]}\n  seeds: 3\n")
    (tmp_path / "overlay.yaml").write_text("paper: {seeds: 2, train: {batch: [8]}}\nextra: on\n")
    seen = {}
    for how in ("directive", "parsed"):
        out = tmp_path / f"{how}.json"
        proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--quiet", *cli],
                              cwd=tmp_path, capture_output=True, text=True,
                              env={**os.environ, "HOW": how, "OUT": str(out)})
        assert proc.returncode == 0, proc.stderr[-2000:]
        seen[how] = json.loads(out.read_text())
    assert seen["parsed"] == seen["directive"]
    assert seen["parsed"]["configfiles"][-2:] == ["base.yaml", "paper.yaml"]
    if "--replace-workflow-config" in cli:  # the files' values discarded, the command line's kept
        assert seen["parsed"]["config"] == {"scale": "quick"}
    if "--configfile" in cli and "--config" in cli:
        config = seen["parsed"]["config"]  # the command line over the overlay over the files, merged by key
        assert (config["scale"], config["paper"]["seeds"], config["extra"]) == ("quick", 2, True)
        train = config["paper"]["train"]
        assert (str(train["rounds"]), train["lr"], train["batch"]) == ("7", 0.05, [8])



OUTER = """
module paper:
    snakefile: "Snakefile"
    config: {"scale": "module", "paper": {"seeds": 9}}

use rule * from paper as paper_*
"""


def test_as_a_snakemake_module_the_files_are_skipped_as_the_directive_skips_them(tmp_path):
    """A workflow that uses this one as a module hands it its config: neither the directive nor
    add_config_file reads the module's own files (``skip_configfile``)."""
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    (tmp_path / "Outer.smk").write_text(OUTER)
    (tmp_path / "base.yaml").write_text("scale: paper\npaper: {train: {rounds: 100}}\n")
    (tmp_path / "paper.yaml").write_text("paper: {seeds: 3}\n")
    seen = {}
    for how in ("directive", "parsed"):
        out = tmp_path / f"{how}.json"
        proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--quiet",
                               "--snakefile", "Outer.smk"], cwd=tmp_path, capture_output=True, text=True,
                              env={**os.environ, "HOW": how, "OUT": str(out)})
        assert proc.returncode == 0, proc.stderr[-2000:]
        seen[how] = json.loads(out.read_text())
    assert seen["parsed"] == seen["directive"]
    assert seen["parsed"]["config"] == {"scale": "module", "paper": {"seeds": 9}}
    assert not {"base.yaml", "paper.yaml"} & set(seen["parsed"]["configfiles"])
