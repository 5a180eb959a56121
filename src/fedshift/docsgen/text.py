"""Text helpers shared by the generated pages: one-line cells, flattened mappings, csv tables as Markdown."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = ["MAX_CSV_ROWS", "RESIDUE", "clean_note", "format_cell", "csv_markdown", "oneline", "flatten", "read_csv"]

MAX_CSV_ROWS = 40


def oneline(text: Any) -> str:
    """``text`` on one line (whitespace runs made one space) with ``|`` escaped, for a Markdown table cell."""
    return re.sub(r"\s+", " ", str(text)).strip().replace("|", "\\|")


#: Development references that mean nothing to a reader: the team's spec file, issue numbers, the development
#: machine's paths and the device lending (the residue test greps every user page for these).
RESIDUE = re.compile(r"papers_spec|\bissues? #?\d+|No GPU was lent|\.\./shared/|(?<![\w.])/work/")
_NOTE_RESIDUE = re.compile(r"\s*\(\s*(?:papers_spec(?:\s?§\s?[\d.]*\d)?|issues? #?\d+)\s*\)"
                           r"|[;,]?\s*\b(?:papers_spec(?:\s?§\s?[\d.]*\d)?|issues? #?\d+)\b")


def clean_note(text: str) -> str:
    """A config file's comment as a reader's page shows it: one line, references to development files removed.

    ``papers_spec §3.2`` (the team's notes, not shipped) and a parenthesised work-log pointer (``issue`` and its number) are dropped with their separator; an
    emptied parenthesis goes too.
    """
    out = _NOTE_RESIDUE.sub("", re.sub(r"\s+", " ", str(text)))
    out = re.sub(r"\(\s*[;,]\s*", "(", out)
    return re.sub(r"\(\s*\)", "", out).strip()


def flatten(node: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """The leaves of a nested mapping as ``(dotted.key, value)`` pairs, in order (a list is a leaf)."""
    if isinstance(node, Mapping):
        for k, v in node.items():
            yield from flatten(v, f"{prefix}.{k}" if prefix else str(k))
    else:
        yield prefix, node


def read_csv(path: Path) -> pd.DataFrame:
    """A CSV file as a DataFrame; an empty file (no header) as an empty one."""
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()


def format_cell(value: Any) -> str:
    """One csv cell as the generated pages print it.

    Floats get 4 significant digits, one decimal from 1000 on; text is kept as it is.
    """
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        return f"{value:.1f}" if abs(value) >= 1000 else f"{value:.4g}"  # 4 significant digits, never 1.4e+03
    return oneline(value)


def csv_markdown(table: pd.DataFrame, max_rows: int = MAX_CSV_ROWS) -> str:
    """A tidy table as Markdown (its first ``max_rows`` rows, cells by :func:`format_cell`)."""
    if table.columns.empty:
        return "*An empty table.*\n"
    shown = table.head(max_rows)
    lines = ["| " + " | ".join(oneline(c) for c in shown.columns) + " |",
             "|" + "---|" * len(shown.columns)]
    for row in shown.itertuples(index=False):
        lines.append("| " + " | ".join(format_cell(v) for v in row) + " |")
    if len(table) > max_rows:
        lines += ["", f"*The first {max_rows} of {len(table)} rows.*"]
    return "\n".join(lines) + "\n"

