"""Config files parsed one by one, so that a YAML error names its file: ``python -m fedshift.validation FILE``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedshift.errors import ConfigError, parse_yaml

__all__ = ["check_yaml_file", "main"]


def check_yaml_file(path: str | Path) -> dict[str, Any]:
    """Parse one configuration file, or fail naming the file, the line and what is wrong.

    Snakemake's own message for a broken config file ("Config file is not valid JSON or YAML", "must be given as
    JSON or YAML with keys at top level") names no file, and Snakemake keeps the last of two equal keys silently;
    pre-parsing each file with this names it: a tab used for indentation, an unclosed bracket, a key given twice in
    one mapping (top level, nested, or in a JSON file: :class:`fedshift.errors.StrictLoader`), a list or a scalar at
    the top level, a file with no keys (empty or comments only), bytes that are not UTF-8 text (a binary or UTF-16
    file).

    Returns
    -------
    dict
        The file's mapping (at least one key).

    Raises
    ------
    ConfigError
        ``config file <path>, line L column C: <problem>`` (syntax, duplicate key ``'k'`` with the line of its first
        occurrence), or ``config file <path>: <problem>`` (not UTF-8, no keys, a top level that is not a mapping).
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
            data = parse_yaml(text)
        except yaml.YAMLError as err:
            if isinstance(err, yaml.constructor.ConstructorError):
                raise
            yaml.safe_load(text)  # the pure-Python parser names the offending character (a tab), libyaml does not
            raise
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
        where = f", line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        hint = " (a tab: YAML indents with spaces only)" if "'\\t'" in str(err) else ""
        what = "" if str(problem).startswith("duplicate key") else "not valid YAML: "
        raise ConfigError(f"config file {path}{where}: {what}{problem}{hint}") from err
    if data is None or data == {}:
        raise ConfigError(f"config file {path}: no keys (the file is empty or holds only comments); a config file "
                          "or overlay sets at least one key, e.g. `scale: quick`")
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: the top level is a {type(data).__name__} ({data!r:.40}), not a "
                          "mapping of keys (e.g. `scale: quick`)")
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
