"""Config files parsed one by one, so that a YAML error names its file: ``python -m fedshift.validation FILE``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedshift.config import SAFE_LOADER, ConfigError

__all__ = ["check_yaml_file", "main"]


def check_yaml_file(path: str | Path) -> dict[str, Any]:
    """Parse one configuration file, or fail naming the file, the line and what is wrong.

    Snakemake's own message for a broken config file ("Config file is not valid JSON or YAML", "must be given as
    JSON or YAML with keys at top level") names no file; pre-parsing each file with this names it: a tab used for
    indentation, an unclosed bracket, a list or a scalar at the top level.

    Returns
    -------
    dict
        The file's mapping (empty for an empty file).

    Raises
    ------
    ConfigError
        ``config file <path>, line L column C: <problem>``, or ``...: the top level is a <type>, not a mapping of
        keys``.
    """
    import yaml

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"config file {path}: cannot read it ({err.strerror or err})") from err
    except UnicodeDecodeError as err:
        raise ConfigError(f"config file {path}: not UTF-8 text ({err.reason} at byte {err.start})") from err
    try:
        try:
            data = yaml.load(text, Loader=SAFE_LOADER)  # noqa: S506 - a safe loader
        except yaml.YAMLError:
            yaml.safe_load(text)  # the pure-Python parser names the offending character (a tab), libyaml does not
            raise
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
        where = f", line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        hint = " (a tab: YAML indents with spaces only)" if "'\\t'" in str(err) else ""
        raise ConfigError(f"config file {path}{where}: not valid YAML: {problem}{hint}") from err
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: the top level is a {type(data).__name__}, not a mapping of keys "
                          "(e.g. `scale: quick`)")
    return data



def main(argv: list[str] | None = None) -> int:
    """``python -m fedshift.validation FILE...``: parse config files (overlays), naming the file of a YAML error.

    Snakemake parses ``--configfile`` overlays before the workflow runs and reports a broken one without its
    name; this names it. Exit status 0 when every file parses to a mapping, 1 otherwise.
    """
    import sys

    status = 0
    for f in sys.argv[1:] if argv is None else argv:
        try:
            check_yaml_file(f)
        except ConfigError as err:
            print(f"fedshift: {err}", file=sys.stderr)
            status = 1
        else:
            print(f"{f}: ok")
    return status
