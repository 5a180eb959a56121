"""The configuration reference page: the schemas' keys with the values and comments of the config files.

Also :func:`rewrite_block`, which writes a generated block (this reference, the README's verdict counts) into a
hand-written file.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from fedshift.docsgen.schema import KeyDoc, schema_files, schema_keys
from fedshift.docsgen.text import flatten, oneline, clean_note

__all__ = ["README_BLOCK", "CONFIG_BLOCK", "CONFIG_FILES", "yaml_comments", "config_notes", "config_values",
           "config_reference", "rewrite_block", "default_text", "key_html"]

README_BLOCK = "verdict-counts"
CONFIG_BLOCK = "config-reference"
_KEY_LINE = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z0-9_][A-Za-z0-9_\-]*):(?P<rest>.*)$")
_COMMENT = re.compile(r"""^(?:[^#"']|"[^"]*"|'[^']*')*?\s(?P<hash>#)\s?(?P<text>.*)$""")
#: Config files whose comments annotate keys, in the order their notes are preferred.
CONFIG_FILES = ("config/config.yaml", "config/datasets.yaml", "config/papers/*.yaml", "config/*.yaml")


def yaml_comments(text: str) -> dict[str, str]:
    """The comment that stands next to each key of a YAML file, by dotted key path.

    A comment on the key's line counts, continued by comment-only lines that follow it at the same column; keys of
    flow mappings (``{a: 1}``) and list items are not followed.

    Parameters
    ----------
    text : str
        The YAML file's text.

    Returns
    -------
    dict of str to str
        Key path (``"afl.defaults.train.batch_size"``) -> its comment, whitespace collapsed.
    """
    notes: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    last: tuple[str, int] | None = None  # the key whose comment may continue, and the comment's column
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            if last is not None and line.index("#") == last[1]:
                notes[last[0]] += " " + stripped.lstrip("#").strip()
                continue
            last = None
            continue
        m = _KEY_LINE.match(line)
        if not m:
            last = None
            continue
        indent = len(m.group("indent"))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, m.group("key")))
        path = ".".join(k for _, k in stack)
        c = _COMMENT.match(m.group("rest"))
        if c and c.group("text").strip():
            notes[path] = c.group("text").strip()
            last = (path, len(line) - len(m.group("rest")) + c.start("hash"))
        else:
            last = None
    return {k: oneline(v) for k, v in notes.items()}


def config_notes(root: Path) -> list[tuple[str, str, str]]:
    """Every commented key of the configuration files: (key path, comment, file), in :data:`CONFIG_FILES` order."""
    seen: set[Path] = set()
    out = []
    for pattern in CONFIG_FILES:
        for path in sorted(root.glob(pattern)):
            if path in seen:
                continue
            seen.add(path)
            for key, note in yaml_comments(path.read_text()).items():
                out.append((key, note, path.relative_to(root).as_posix()))
    return out



def config_values(root: Path) -> list[tuple[str, Any]]:
    """Every leaf value of the base configuration: (dotted key path, value).

    The base configuration is ``config/config.yaml``, ``config/datasets.yaml`` and ``config/papers/*.yaml``, without
    the overlays.
    """
    out: list[tuple[str, Any]] = []
    for pattern in CONFIG_FILES[:3]:
        for path in sorted(root.glob(pattern)):
            out += list(flatten(yaml.safe_load(path.read_text()) or {}))
    return out


def _candidates(path: str, aliases: Mapping[str, list[str]]) -> list[re.Pattern[str]]:
    """Patterns of the concrete key paths that ``path`` documents.

    Itself, and where its keys stand for the same keys elsewhere (a ``$ref`` listed once, e.g. ``defaults`` for every
    experiment), those paths too.
    """
    paths = [path]
    for base, others in aliases.items():
        if path.startswith(base + "."):
            paths += [o + path[len(base):] for o in others]
    return [_pattern(p) for p in paths]


def _value_for(patterns: Sequence[re.Pattern[str]], values: Sequence[tuple[str, Any]]) -> tuple[str, str]:
    """The first base-configuration value at a key path that one of ``patterns`` matches: (its Markdown, the path)."""
    for pat in patterns:
        for key, value in values:
            if pat.match(key):
                text = json.dumps(value, ensure_ascii=False)
                return oneline(f"`{text}`" if len(text) <= 40 else f"`{text[:37]}…`"), key
    return "", ""


def default_text(key: KeyDoc, value: str, where: str) -> str:
    """The *default* cell of a key: what the workflow uses where an overlay does not set it.

    Parameters
    ----------
    key : KeyDoc
        The key, from :func:`fedshift.docsgen.schema_keys`.
    value : str
        Its first value in the base configuration, as Markdown (:func:`config_values`), or "".
    where : str
        The key path that value stands at ("" when none).

    Returns
    -------
    str
        The schema's ``default``; else the base configuration's value where the key path is that value's own (a
        key the files set once); else ``e.g. <value>`` where the key is set per chosen name (``<name>``, a list
        item, an experiment, the keys of ``defaults``); else ``its keys`` for a mapping whose keys have rows of
        their own, ``as at `X``` for a row standing for the keys of ``X``, ``required`` for a required key, and
        ``not set`` for an optional key no file sets.
    """
    if key.path.endswith(".*"):  # "the keys of `X`": their defaults are X's
        return f"as at `{key.meaning.split('`')[1]}`" if "`" in key.meaning else "its keys"
    if key.default:
        return oneline(f"`{key.default}`")
    if value:
        return value if where == key.path else f"e.g. {value}"
    if key.type.startswith("object"):
        return "its keys"
    return "required" if key.required else "not set"


def key_html(path: str, required: bool = False) -> str:
    """A key path as the reference's key cell shows it: code that a narrow column breaks only after ``.`` or ``_``.

    ``<wbr>`` after every ``.`` and ``_`` (the stylesheet keeps class ``fs-key`` from breaking anywhere else);
    ``<``, ``>`` and ``*`` escaped; **bold** when ``required``.
    """
    parts = [html.escape(p, quote=False).replace("*", "\\*") for p in re.split(r"(?<=[._])", path)]
    code = f'<code class="fs-key">{"<wbr>".join(parts)}</code>'
    return f"**{code}**" if required else code


def _pattern(path: str) -> re.Pattern[str]:
    parts = [r"[^.]+" if p == "<name>" else re.escape(p) for p in path.replace("[]", "").split(".")]
    return re.compile(r"\.".join(parts) + "$")


def _note_for(patterns: Sequence[re.Pattern[str]], notes: Sequence[tuple[str, str, str]]) -> str:
    for pat in patterns:
        for key, note, file in notes:
            if pat.match(key):
                return f"{clean_note(note)} *(note in `{file}`)*"
    return ""


def config_reference(root: Path) -> str:
    """The configuration reference in Markdown: one table per schema, one row per key.

    Parameters
    ----------
    root : Path
        The repository root.

    Returns
    -------
    str
        Markdown with a heading per schema (the workflow's own, then each paper's section) and the columns key
        (:func:`key_html`; required keys **bold**), type, default (:func:`default_text`: the schema's default,
        else the base configuration's value), range and meaning: the schema's description, else the comment next to
        the key in a config file (:func:`yaml_comments`), naming the file.
    """
    lines: list[str] = []
    notes = config_notes(root)
    values = config_values(root)
    for section, path in schema_files(root):
        schema = yaml.safe_load(path.read_text())
        keys = schema_keys(schema, section)
        aliases: dict[str, list[str]] = {}
        for k in keys:
            if k.path.endswith(".*"):
                aliases.setdefault(k.meaning.split("`")[1], []).append(k.path[:-2])
        rel = path.relative_to(root).as_posix()
        title = f"`{section}:`, the section of `config/papers/{section}.yaml`" if section else \
            "Top level (`config/config.yaml`, `config/datasets.yaml`, overlays)"
        lines += [f"### {title}", "", f"Schema `{rel}`. {oneline(schema.get('description', ''))}".rstrip(), "",
                  "| key | type | default | range | meaning |", "|---|---|---|---|---|"]
        for k in keys:
            patterns = [] if k.path.endswith(".*") else _candidates(k.path, aliases)
            # a note on a list item's key speaks of that item only: not a meaning of the key
            meaning = k.meaning or ("" if "[]" in k.path else _note_for(patterns, notes))
            default = default_text(k, *_value_for(patterns, values))
            meaning = meaning.replace("[", "\\[")  # text, not Markdown links: "[ours]", "[0, 1]"
            lines.append(f"| {key_html(k.path, k.required)} | {oneline(k.type)} | {default} | {oneline(k.range)} | "
                         f"{meaning} |")
        lines.append("")
    return "\n".join(lines)


def rewrite_block(text: str, name: str, block: str) -> str:
    """Replace the text between ``<!-- NAME:begin ... -->`` and ``<!-- NAME:end -->`` with ``block``.

    Parameters
    ----------
    text : str
        The file's text.
    name : str
        The block's name (``"config-reference"``, ``"verdict-counts"``).
    block : str
        The new content.

    Raises
    ------
    ValueError
        If the text holds no such block or more than one.
    """
    pattern = re.compile(rf"(<!-- {re.escape(name)}:begin[^>]*-->\n)(.*?)(<!-- {re.escape(name)}:end -->)", re.S)
    found = pattern.findall(text)
    if len(found) != 1:
        raise ValueError(f"expected exactly one '<!-- {name}:begin -->' … '<!-- {name}:end -->' block, "
                         f"found {len(found)}")
    return pattern.sub(lambda m: m.group(1) + block.rstrip("\n") + "\n" + m.group(3), text)
