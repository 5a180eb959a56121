"""Every use of Snakemake's undocumented internals, in one module, with the Snakemake versions it is known to work on.

The workflow uses two of them, each for speed (``docs/concepts/snakemake.md``):

- :func:`add_config_file` does what the Snakefile directive ``configfile:`` does with a mapping already parsed, so
  that each config file is parsed once, by libyaml, and a YAML error names its file (:func:`check_yaml_file`). It
  reads and writes ``Workflow.configfiles``, ``Workflow.config_settings`` (``overwrite_config``,
  ``replace_workflow_config``), ``Workflow.modifier.skip_configfile`` and ``Workflow.pathvars`` with
  ``snakemake.pathvars.Pathvars.from_config``: the body of ``snakemake.workflow.Workflow.configfile``.
- :func:`inspected_once` sets ``snakemake.common.overwrite_function_params`` on an input, params or resources function,
  which Snakemake's ``get_function_params`` answers instead of ``inspect.signature``.

:data:`SNAKEMAKE_VERSIONS` are the versions where both are known to work: ``Workflow.configfile``'s body is the same
from 9.12.0 (the first with ``pathvars``) to 9.27.1, and ``tests/unit/test_config_files.py`` (this module against the
directive) and ``tests/unit/test_snakemake_api.py`` passed on 9.12.0 and 9.27.1. The Snakefile calls
:func:`check_snakemake_version` first, so another version fails at workflow start, by name. To support a newer
Snakemake: compare its ``Workflow.configfile`` and ``snakemake.common.overwrite_function_params`` with the ones
described here, run those two test files on it, then widen :data:`SNAKEMAKE_VERSIONS` and the same range in
``pyproject.toml`` (extra ``workflow``) and ``envs/requirements.in`` (a test keeps the three equal).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Callable, TypeVar

__all__ = ["SNAKEMAKE_VERSIONS", "UnsupportedSnakemake", "check_snakemake_version", "add_config_file",
           "inspected_once"]

SNAKEMAKE_VERSIONS = ">=9.12,<9.28"
"""The Snakemake versions this module's uses of Snakemake internals are known to work on (a PEP 440 specifier)."""

F = TypeVar("F")


class UnsupportedSnakemake(RuntimeError):
    """The running Snakemake is outside :data:`SNAKEMAKE_VERSIONS`."""


def check_snakemake_version(version: str | None = None) -> str:
    """Fail unless ``version`` (default: the running Snakemake's) lies in :data:`SNAKEMAKE_VERSIONS`.

    Parameters
    ----------
    version : str, optional
        A Snakemake version; default ``snakemake.__version__``.

    Returns
    -------
    str
        The version checked.

    Raises
    ------
    UnsupportedSnakemake
        ``Snakemake <version> is not a supported version (<range>) ...``, naming how to install a supported one
        and how to add a version (this module's docstring).
    """
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    if version is None:
        import snakemake

        version = str(snakemake.__version__)
    try:
        ok = Version(version) in SpecifierSet(SNAKEMAKE_VERSIONS)
    except InvalidVersion:
        ok = False
    if not ok:
        raise UnsupportedSnakemake(
            f"Snakemake {version} is not a supported version ({SNAKEMAKE_VERSIONS}): the workflow uses Snakemake "
            f"internals (configfile:, overwrite_function_params) known to work only there. Install one with "
            f"`pip install 'snakemake{SNAKEMAKE_VERSIONS}'` (envs/requirements.txt pins one), or, to add this "
            "version, follow fedshift/validation/snakemake_api.py's docstring (docs/concepts/snakemake.md)"
        )
    return version


def add_config_file(workflow: Any, path: str | Path, data: dict[str, Any]) -> None:
    """Do what the Snakefile directive ``configfile: path`` does, with the file's mapping already parsed.

    Snakemake 9's ``Workflow.configfile`` parses the file again, with PyYAML's pure-Python ``FullLoader`` (through
    yte): for the repository's own config files that is 0.28 CPU-s of a 2.3 CPU-s quick plan, where
    :func:`~fedshift.validation.check_yaml_file` (libyaml) has just parsed them in 0.015. This merges ``data`` as
    that method does (Snakemake internals: this module's docstring): the file is listed in ``workflow.configfiles``
    (the report and ``--archive`` list it), its mapping is merged into the config
    (:func:`snakemake.utils.update_config`), then the command line's ``--config``/``--configfile`` values again, so
    that they still win, and the path variables are refreshed from the config. In a workflow used as a Snakemake
    module (``skip_configfile``) it does nothing, as the directive; with ``--replace-workflow-config`` it calls the
    directive itself. ``tests/unit/test_config_files.py`` checks the result against the directive's.

    Parameters
    ----------
    workflow : snakemake.workflow.Workflow
        The Snakefile's ``workflow``.
    path : str or Path
        The config file, as the directive would name it.
    data : dict
        Its mapping, from :func:`~fedshift.validation.check_yaml_file` (merged in place: not to be reused).
    """
    from snakemake.logging import logger
    from snakemake.pathvars import Pathvars
    from snakemake.utils import update_config

    if workflow.modifier.skip_configfile:
        return
    settings = workflow.config_settings
    if settings.replace_workflow_config:
        workflow.configfile(path)
        return
    workflow.configfiles.append(path)
    update_config(workflow.config, data)
    if settings.overwrite_config:
        logger.info(f"Config file {path} is extended by additional config specified via the command line.")
        update_config(workflow.config, settings.overwrite_config)
    workflow.pathvars.update(Pathvars.from_config(workflow.config))


def inspected_once(func: F) -> F:
    """``func``, an input, params or resources function, with its parameters recorded on it for Snakemake.

    Snakemake asks a function's parameters (``inspect.signature``) each time it calls it, per job: 61,781 times in a
    paper-scale plan (a tenth of ``snakemake -n``, profiled). Its own override attribute
    (``snakemake.common.overwrite_function_params``, read by ``snakemake.common.get_function_params``) answers
    instead; it is given what ``inspect.signature`` says, so Snakemake passes the same arguments. A bound method's
    attribute lives on its function (the same parameters for every instance of the class). A value that is not a
    function (a resource every job of a rule shares) is returned as it is.

    Parameters
    ----------
    func : callable or any
        What the rule's ``input:``, ``params:`` or ``resources:`` entry holds.

    Returns
    -------
    callable or any
        ``func`` itself.
    """
    from snakemake.common import overwrite_function_params

    if callable(func):
        target: Callable[..., Any] = getattr(func, "__func__", func)
        overwrite_function_params(target, inspect.signature(func).parameters)
    return func
