"""WAFL (arXiv:2206.01432) as a paper plug-in: :class:`~fedshift.papers.wafl.paper.WaflPaper`.

Submodules, one role each: :mod:`.paper` (the plug-in class of :mod:`fedshift.contract`, the only API the workflow
calls), :mod:`.config` (the section's merging, cross-key checks, experiments, run ids and each run's resolved
hyper-parameters), :mod:`.data` (the partition and a run's tensors), :mod:`.fit` (training and evaluation of one
run), :mod:`.report` (figures, Table 2, eq. 9's λ), ``schema.yaml`` (the ``wafl:`` section's JSON schema) and
``report.rst`` (the report caption). The digits helpers stay in :mod:`fedshift.data.digits` (FedMM's digits
pre-processing imports them too).

The public names of ``config``, ``data`` and ``fit`` are re-exported here (``from fedshift.papers import wafl as W;
W.resolve_run(...)``), each imported on first use (:func:`fedshift.plugins.lazy_exports`): importing the package,
its ``config`` or its ``paper`` (the plan) imports no torch. ``report`` is not re-exported.
"""

from fedshift.plugins import lazy_exports

__getattr__ = lazy_exports(__name__, ("config", "data", "fit"))
