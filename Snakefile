# fedshift: reproduce five papers on federated learning under distribution shift.
# Entry point only: configuration, rule files, and the default target. See README.md.
import sys
from pathlib import Path

from snakemake.utils import min_version

min_version("9.0")

# Each config file parsed first, so that a YAML error (a tab, an unclosed bracket, a list at the top level) names
# its file and line (Snakemake's own message names only this Snakefile; fedshift.validation.check_yaml_file).
# Overlays given with --configfile are parsed by Snakemake before this file runs (an empty, list or non-UTF-8
# overlay fails there, unnamed: check one with `python -m fedshift.validation config/my_overlay.yaml`); the loop
# below reads them again for what Snakemake lets through (a duplicate key).
_CONFIG_FILES = [
    Path(workflow.basedir, "config", "config.yaml"),
    Path(workflow.basedir, "config", "datasets.yaml"),
    *sorted(Path(workflow.basedir, "config", "papers").glob("*.yaml")),
]
try:
    from fedshift.validation import check_yaml_file

    for _f in [*_CONFIG_FILES, *workflow.overwrite_configfiles]:  # overlays: their duplicate keys, empty files
        check_yaml_file(_f)
except ValueError as _err:  # fedshift.config.ConfigError
    sys.exit(f"fedshift: {_err}")


configfile: "config/config.yaml"
configfile: "config/datasets.yaml"


# every paper's YAML: its plug-in line (`papers: {name: module:Class}`) and its section
for _paper_yaml in _CONFIG_FILES[2:]:

    configfile: _paper_yaml


include: "workflow/rules/common.smk"


wildcard_constraints:
    dataset="|".join(DATASETS),
    seed=r"\d+",


include: "workflow/rules/data.smk"
include: "workflow/rules/runs.smk"
include: "workflow/rules/claims.smk"
include: "workflow/rules/docs.smk"


rule all:
    default_target: True
    input:
        all_outputs(default_papers()),
        rules.claims.output,
