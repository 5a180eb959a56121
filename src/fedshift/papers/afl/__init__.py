"""AFL (Mohri, Sivek, Suresh: Agnostic Federated Learning, ICML 2019): Tables 1 (Adult) and 2 (Fashion-MNIST).

The paper plug-in is :class:`fedshift.papers.afl.paper.AflPaper`; its section ``afl:`` is checked and resolved in
:mod:`~fedshift.papers.afl.runs`, its data built in :mod:`~fedshift.papers.afl.data` and its runs trained and
evaluated in :mod:`~fedshift.papers.afl.train`. The algorithm itself, Stochastic-AFL (Fig. 3), is the registered
algorithm ``afl`` (:mod:`fedshift.algorithms.afl`).
"""

from fedshift.papers.afl.data import ExperimentData, domain_ids, evaluate_domains, load_experiment, make_partition
from fedshift.papers.afl.runs import algorithm_ids, check_section, domain_names, model_id, resolve_hparams
from fedshift.papers.afl.train import build_algorithm, evaluate_run, setup, train_runs, validation_score

__all__ = ["ExperimentData", "domain_ids", "evaluate_domains", "load_experiment", "make_partition", "algorithm_ids",
           "check_section", "domain_names", "model_id", "resolve_hparams", "build_algorithm", "evaluate_run",
           "setup", "train_runs", "validation_score"]
