"""WAFL (arXiv:2206.01432) as a paper plug-in: :class:`~fedshift.papers.wafl.paper.WaflPaper`.

Submodules, one role each: :mod:`.paper` (the plug-in class of :mod:`fedshift.contract`, the only API the workflow
calls), :mod:`.config` (the section's merging, cross-key checks, experiments, run ids and each run's resolved
hyper-parameters), :mod:`.data` (the partition and a run's tensors), :mod:`.fit` (training and evaluation of one
run), :mod:`.report` (figures, Table 2, eq. 9's λ), ``schema.yaml`` (the ``wafl:`` section's JSON schema) and
``report.rst`` (the report caption). The digits helpers stay in :mod:`fedshift.data.digits` (FedMM's digits
pre-processing imports them too). The public names of the three computation modules are re-exported here
(``from fedshift.papers import wafl as W; W.resolve_run(...)``). The report module is not imported here: a training
job's code hash must not cover plotting code.
"""

from fedshift.papers.wafl.config import *  # noqa: F403
from fedshift.papers.wafl.config import __all__ as _config_all
from fedshift.papers.wafl.data import *  # noqa: F403
from fedshift.papers.wafl.data import __all__ as _data_all
from fedshift.papers.wafl.fit import *  # noqa: F403
from fedshift.papers.wafl.fit import __all__ as _fit_all

__all__ = [*_config_all, *_data_all, *_fit_all]
