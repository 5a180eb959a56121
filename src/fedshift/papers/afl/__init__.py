"""AFL (Mohri, Sivek, Suresh: Agnostic Federated Learning, ICML 2019): Tables 1 (Adult) and 2 (Fashion-MNIST).

``paper`` holds the plug-in class (:class:`~fedshift.papers.afl.paper.AflPaper`, switched on in
``config/papers/afl.yaml``); ``config`` the section's checks, the tables, experiments and datasets to build, the run
ids and each run's resolved hyper-parameters; ``data`` the domain partitions and each run's clients and test sets;
``fit`` training (one run or several seeds batched) and evaluation; ``report`` the tables and figures;
``schema.yaml`` the section's schema, ``report.rst`` the report caption. The algorithm itself, Stochastic-AFL
(Fig. 3), is the registered algorithm ``afl`` (:mod:`fedshift.algorithms.afl`). The public names of the three
computation modules are re-exported here. The report module is not imported here: a training job's code hash must
not cover plotting code.
"""

from fedshift.papers.afl.config import *  # noqa: F403
from fedshift.papers.afl.config import __all__ as _config_all
from fedshift.papers.afl.data import *  # noqa: F403
from fedshift.papers.afl.data import __all__ as _data_all
from fedshift.papers.afl.fit import *  # noqa: F403
from fedshift.papers.afl.fit import __all__ as _fit_all

__all__ = [*_config_all, *_data_all, *_fit_all]
