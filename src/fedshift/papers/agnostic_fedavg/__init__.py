"""AgnosticFedAvg (Ro et al. 2021, arXiv:2104.02748) and the AFL language-model Table 3 (Mohri et al. 2019).

A paper plug-in (:class:`~fedshift.papers.agnostic_fedavg.paper.AgnosticFedAvgPaper`, switched on in
``config/papers/agnostic_fedavg.yaml``); submodules: :mod:`.core` (config checks, data, training run, tidy
metrics), :mod:`.data` (toy regression, client spreading), :mod:`.models` (EMNIST CNN, toy regression),
:mod:`.report` (tables and figures), :mod:`.paper` (the plug-in). The names below keep
``from fedshift.papers import agnostic_fedavg`` working.
"""

from fedshift.papers.agnostic_fedavg.core import (
    KINDS,
    OUTPUT_KINDS,
    SOURCE_DATASETS,
    build_algorithm,
    build_data,
    build_module,
    check_config,
    datasets_of,
    domain_names,
    effective_client_lr,
    evaluator,
    experiments_of,
    load_data,
    loss_of,
    metrics_rows,
    registered_algorithm,
    resolve_run,
    runs_of,
    train_run,
    write_summary,
)

__all__ = ["KINDS", "OUTPUT_KINDS", "SOURCE_DATASETS", "check_config", "datasets_of", "experiments_of", "runs_of",
           "resolve_run", "domain_names", "build_data", "write_summary", "load_data", "build_module", "loss_of",
           "evaluator", "effective_client_lr", "build_algorithm", "registered_algorithm", "train_run",
           "metrics_rows"]
