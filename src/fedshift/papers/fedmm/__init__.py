"""FedMM (Shen et al., AAMAS 2023; arXiv:2110.08477) as a paper plug-in: :class:`.paper.FedmmPaper`.

Submodules, one role each: :mod:`.paper` (the plug-in class of :mod:`fedshift.contract`, the only API the workflow
calls, and :func:`~fedshift.papers.fedmm.paper.train_job` for tests and benchmarks), :mod:`.config` (tasks with
``defaults`` merged, cross-key checks, run settings, run ids and each run's resolved hyper-parameters), :mod:`.data`
(the clients' split of a task's rows and a run's tensors), :mod:`.fit` (the network and optimizer, training and
evaluation of one run), :mod:`.report` (Figs. 1, 4–7 and Table 1), ``schema.yaml`` (the ``fedmm:`` section's
JSON schema) and ``report.rst`` (the report caption).

The public names of ``config``, ``data`` and ``fit`` are re-exported here (``from fedshift.papers import fedmm as P;
P.resolve_run(...)``), each imported on first use (:func:`fedshift.plugins.lazy_exports`): importing the package,
its ``config`` or its ``paper`` (the plan) imports no torch. ``report`` is not re-exported.
"""

from fedshift.plugins import lazy_exports

__getattr__ = lazy_exports(__name__, ("config", "data", "fit"))
