"""FedMM (Shen et al., AAMAS 2023; arXiv:2110.08477) as a paper plug-in: :class:`.paper.FedmmPaper`.

Submodules, one role each: :mod:`.paper` (the plug-in class of :mod:`fedshift.contract`, the only API the workflow
calls, and :func:`~fedshift.papers.fedmm.paper.train_job` for tests and benchmarks), :mod:`.config` (tasks with
``defaults`` merged, cross-key checks, run settings, run ids and each run's resolved hyper-parameters), :mod:`.data`
(the clients' split of a task's rows and a run's tensors), :mod:`.fit` (the network and optimizer, training and
evaluation of one run), :mod:`.report` (Figs. 1, 4–7 and Table 1), ``schema.yaml`` (the ``fedmm:`` section's
JSON schema) and ``report.rst`` (the report caption). The public names of the three computation modules are
re-exported here (``from fedshift.papers import fedmm as P; P.resolve_run(...)``). The report module is not
imported here: a training job's code hash must not cover plotting code.
"""

from fedshift.papers.fedmm.config import *  # noqa: F403
from fedshift.papers.fedmm.config import __all__ as _config_all
from fedshift.papers.fedmm.data import *  # noqa: F403
from fedshift.papers.fedmm.data import __all__ as _data_all
from fedshift.papers.fedmm.fit import *  # noqa: F403
from fedshift.papers.fedmm.fit import __all__ as _fit_all

__all__ = [*_config_all, *_data_all, *_fit_all]
