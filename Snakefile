# fedshift: reproduce five papers on federated learning under distribution shift.
# Entry point only: configuration, rule files, and the default target. See README.md.
from pathlib import Path

from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"
configfile: "config/datasets.yaml"


# every paper's YAML: its plug-in line (`papers: {name: module:Class}`) and its section
for _paper_yaml in sorted(Path(workflow.basedir, "config", "papers").glob("*.yaml")):

    configfile: _paper_yaml


include: "workflow/rules/common.smk"


wildcard_constraints:
    experiment=regex_of(ALL_EXPERIMENTS),
    dataset="|".join(DATASETS),
    seed=r"\d+",


include: "workflow/rules/data.smk"
include: "workflow/rules/runs.smk"
include: "workflow/rules/claims.smk"


rule all:
    default_target: True
    input:
        all_outputs(default_papers()),
        rules.claims.output,
