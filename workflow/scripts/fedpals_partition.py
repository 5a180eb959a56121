"""Snakemake adapter: draw one (experiment, seed) FedPALS partition (clients, target, Oracle)."""

from fedshift.data.prepare import load_prepared
from fedshift.io import write_json
from fedshift.logs import job_logging
from fedshift.papers.fedpals import FILE_DATASETS, make_domain_partition, make_partition

with job_logging(snakemake.log[0]) as log:  # noqa: F821
    sm = snakemake  # noqa: F821
    prepared = load_prepared(sm.input[0])
    if sm.params.spec["dataset"] in FILE_DATASETS:
        part = make_domain_partition(sm.params.spec, prepared, int(sm.wildcards.seed))
    else:
        part = make_partition(sm.params.spec, prepared["y_train"].numpy(), prepared["y_test"].numpy(),
                              int(sm.wildcards.seed))
    write_json(sm.output[0], part)
    log.info("clients %s, target T = %s, d(T, S) = %.4f, validation %d, test %d", part["sizes"],
             [round(v, 3) for v in part["target"]], part["projection_distance"], len(part["validation"]),
             len(part["test"]))
