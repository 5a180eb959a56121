# fedshift: reproduce five papers on federated learning under distribution shift.
# Entry point only: configuration, rule files, and the default target. See README.md.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"
configfile: "config/datasets.yaml"
configfile: "config/papers/afl.yaml"
configfile: "config/papers/wafl.yaml"
configfile: "config/papers/fedpals.yaml"
configfile: "config/papers/fedmm.yaml"
configfile: "config/papers/agnostic_fedavg.yaml"


include: "workflow/rules/common.smk"


wildcard_constraints:
    experiment=regex_of(ALL_EXPERIMENTS),
    dataset="|".join(DATASETS),
    algorithm=r"[a-z_]+(~[A-Za-z0-9/_-]+)?",
    seed=r"\d+",


include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/wafl.smk"
include: "workflow/rules/fedmm.smk"
include: "workflow/rules/agnostic_fedavg.smk"
include: "workflow/rules/runs.smk"
include: "workflow/rules/claims.smk"


rule all:
    default_target: True
    input:
        all_outputs(),
        rules.claims.output,
