"""The generated pages of the documentation site (``docs/``, built with MkDocs).

Configuration reference, verdicts, expected results per paper, the shift matrix and the measurements, each rendered
by code from the repository's schemas and config files and from a results tree (``results/tables``,
``results/figures``, ``results/runs``, ``results/benchmarks``), never copied by hand.

A leaf module: it reads YAML, csv, Markdown and ``run.json`` files and imports nothing of fedshift but
:mod:`fedshift.claims` (the verdict table's rendering). The MkDocs hook ``docs/hooks/generated.py`` calls it at every
build; the Snakemake target ``docs`` (``workflow/rules/docs.smk``) builds the site from the results tree of whatever
scale was run. Command line::

    python -m fedshift.docsgen config config/README.md          # rewrite the reference block of config/README.md
    python -m fedshift.docsgen readme README.md results          # rewrite the README's verdict-count block
    python -m fedshift.docsgen pages results OUT                 # write the generated pages to OUT (to look at)
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

#: Config sections by schema: the workflow's own (top level) and each paper's (its section's name).
WORKFLOW_SCHEMA = "workflow/schemas/config.schema.yaml"
PAPER_SCHEMAS = "src/fedshift/papers/*/schema.yaml"
EXTRA_SCHEMAS = "src/fedshift/schemas/*.yaml"
#: The papers with a page, in the order of the README's table, and their titles.
PAPERS = {
    "afl": "AFL — Mohri, Sivek, Suresh, Agnostic Federated Learning (ICML 2019)",
    "wafl": "WAFL — On the Generalization of Wasserstein Robust Federated Learning (2022)",
    "fedmm": "FedMM — Shen et al., Federated Multi-Marginal Domain Adaptation (AAMAS 2023)",
    "agnostic_fedavg": "AgnosticFedAvg — Ro et al., Communication-Efficient Agnostic Federated Averaging "
                       "(Interspeech 2021)",
    "fedpals": "FedPALS — Listo Zec et al., Federated Learning under Label Shift with Target-Aware Aggregation (2024)",
    "shift_matrix": "Shift matrix — every registered algorithm under every shift",
}
VERDICTS = ("reproduced", "not reproduced", "inconclusive", "not judged", "not run")
#: Scales whose outputs are not results (rehearsal and smoke runs check the workflow, not the papers).
NOT_RESULTS = ("rehearsal", "smoke")
MAX_CSV_ROWS = 40
README_BLOCK = "verdict-counts"
CONFIG_BLOCK = "config-reference"


# ---------------------------------------------------------------------------------------------------------------
# Configuration reference from the JSON schemas


@dataclass(frozen=True)
class KeyDoc:
    """One configuration key as a schema defines it.

    Attributes
    ----------
    path : str
        Dotted key path; a free-named level (``additionalProperties``) reads ``<name>``, a list item ``[]``.
    type : str
        JSON types, enumeration or the alternatives of ``oneOf``/``anyOf``.
    default : str
        The schema's ``default`` (empty when none is given: a required key, or one whose absence the code handles).
    range : str
        Bounds, patterns, sizes and ``required`` for objects, as text.
    meaning : str
        The schema's ``description`` (empty when the schema gives none).
    required : bool
        Whether the enclosing object lists the key as required.
    """

    path: str
    type: str
    default: str
    range: str
    meaning: str
    required: bool


def _resolve(node: Mapping[str, Any], root: Mapping[str, Any]) -> tuple[Mapping[str, Any], str | None]:
    ref = node.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return node, None
    target: Any = root
    for part in ref[2:].split("/"):
        target = target[part]
    merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return merged, ref


def _type_text(node: Mapping[str, Any], root: Mapping[str, Any]) -> str:
    node, _ = _resolve(node, root)
    if "const" in node:
        return f"`{json.dumps(node['const'])}`"
    if "enum" in node:
        return "one of " + ", ".join(f"`{json.dumps(v) if not isinstance(v, str) else v}`" for v in node["enum"])
    for alt in ("oneOf", "anyOf"):
        if alt in node:
            return " or ".join(_type_text(n, root) for n in node[alt])
    t = node.get("type")
    if isinstance(t, list):
        text = " or ".join(str(x) for x in t)
    elif t is not None:
        text = str(t)
    elif "properties" in node or "additionalProperties" in node:
        text = "object"
    else:
        text = "any"
    if t == "array" and isinstance(node.get("items"), Mapping):
        text += f" of {_type_text(node['items'], root)}"
    return text


_BOUNDS = (("minimum", "≥ {}"), ("exclusiveMinimum", "> {}"), ("maximum", "≤ {}"), ("exclusiveMaximum", "< {}"),
           ("minItems", "≥ {} items"), ("maxItems", "≤ {} items"), ("minLength", "length ≥ {}"),
           ("minProperties", "≥ {} keys"), ("pattern", "matches `{}`"))


def _range_text(node: Mapping[str, Any], root: Mapping[str, Any]) -> str:
    node, _ = _resolve(node, root)
    parts = [fmt.format(node[k]) for k, fmt in _BOUNDS if k in node]
    if node.get("uniqueItems"):
        parts.append("unique items")
    if isinstance(node.get("propertyNames"), Mapping):
        names = node["propertyNames"]
        parts.append("names " + (_range_text(names, root) or _type_text(names, root)))
    if node.get("required"):
        parts.append("requires " + ", ".join(f"`{r}`" for r in node["required"]))
    items = node.get("items")
    if isinstance(items, Mapping) and "properties" not in _resolve(items, root)[0]:
        inner = _range_text(items, root)
        if inner:
            parts.append(f"items {inner}")
    return "; ".join(parts)


def _oneline(text: Any) -> str:
    return re.sub(r"\s+", " ", str(text)).strip().replace("|", "\\|")


def schema_keys(schema: Mapping[str, Any], prefix: str = "") -> list[KeyDoc]:
    """Every key a JSON schema defines, depth first, each with type, default, range and meaning.

    A ``$ref`` is expanded where it is first met; later uses of the same definition refer to that path instead of
    repeating its keys. Free-named levels (``additionalProperties`` with a schema) appear as ``<name>``, array items
    with object keys as ``[]``, and the alternatives of ``oneOf``/``anyOf``/``if``-``then`` are walked too.

    Parameters
    ----------
    schema : mapping
        The schema document (its ``$defs`` are resolved against it).
    prefix : str
        Key path of the section the schema validates (``"afl"`` for a paper's section, ``""`` for the top level).

    Returns
    -------
    list of KeyDoc
        One entry per key path, in schema order.
    """
    out: list[KeyDoc] = []
    expanded: dict[str, str] = {}

    def walk(node: Mapping[str, Any], path: str) -> None:
        node, ref = _resolve(node, schema)
        if ref is not None and (node.get("properties") or isinstance(node.get("additionalProperties"), Mapping)):
            if ref in expanded:
                out.append(KeyDoc(f"{path}.*", "", "", "", f"the keys of `{expanded[ref]}`", False))
                return
            expanded[ref] = path or "(top level)"
        required = set(node.get("required", ()))
        for key, sub in (node.get("properties") or {}).items():
            if not isinstance(sub, Mapping):
                continue
            child = f"{path}.{key}" if path else key
            resolved, _ = _resolve(sub, schema)
            default = json.dumps(resolved["default"], ensure_ascii=False) if "default" in resolved else ""
            out.append(KeyDoc(child, _type_text(sub, schema), default, _range_text(sub, schema),
                              _oneline(resolved.get("description", "")), key in required))
            walk(sub, child)
        extra = node.get("additionalProperties")
        if isinstance(extra, Mapping):
            child = f"{path}.<name>" if path else "<name>"
            resolved, _ = _resolve(extra, schema)
            items = resolved.get("items")
            has_items = isinstance(items, Mapping) and bool(_resolve(items, schema)[0].get("properties"))
            if resolved.get("properties") or resolved.get("additionalProperties") or "$ref" in extra or has_items:
                out.append(KeyDoc(child, _type_text(extra, schema), "", _range_text(extra, schema),
                                  _oneline(resolved.get("description", "")), False))
                walk(extra, child)
        items = node.get("items")
        if isinstance(items, Mapping) and (_resolve(items, schema)[0].get("properties")):
            walk(items, f"{path}[]")
        for alt in ("oneOf", "anyOf", "allOf"):
            for sub in node.get(alt, ()):
                if isinstance(sub, Mapping):
                    walk(sub, path)
        for cond in ("then", "else"):
            if isinstance(node.get(cond), Mapping):
                walk(node[cond], path)

    walk(schema, prefix)
    seen: set[str] = set()
    return [k for k in out if not (k.path in seen or seen.add(k.path))]


def schema_files(root: Path) -> list[tuple[str, Path]]:
    """The schemas of the configuration, each with the config section it validates.

    Parameters
    ----------
    root : Path
        The repository root.

    Returns
    -------
    list of (str, Path)
        ``("", workflow schema)`` first, then ``(<paper>, its schema)`` by name, then the shared schemas of
        ``src/fedshift/schemas`` (section: the file's stem) where that folder exists.
    """
    files = [("", root / WORKFLOW_SCHEMA)]
    files += [(p.parent.name, p) for p in sorted(root.glob(PAPER_SCHEMAS))]
    files += [(p.stem.removesuffix(".schema"), p) for p in sorted(root.glob(EXTRA_SCHEMAS))]
    return files


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
    return {k: _oneline(v) for k, v in notes.items()}


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


def _flatten(node: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(node, Mapping):
        for k, v in node.items():
            yield from _flatten(v, f"{prefix}.{k}" if prefix else str(k))
    else:
        yield prefix, node


def config_values(root: Path) -> list[tuple[str, Any]]:
    """Every leaf value of the base configuration: (dotted key path, value).

    The base configuration is ``config/config.yaml``, ``config/datasets.yaml`` and ``config/papers/*.yaml``, without
    the overlays.
    """
    out: list[tuple[str, Any]] = []
    for pattern in CONFIG_FILES[:3]:
        for path in sorted(root.glob(pattern)):
            out += list(_flatten(yaml.safe_load(path.read_text()) or {}))
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


def _value_for(patterns: Sequence[re.Pattern[str]], values: Sequence[tuple[str, Any]]) -> str:
    for pat in patterns:
        for key, value in values:
            if pat.match(key):
                text = json.dumps(value, ensure_ascii=False)
                return _oneline(f"`{text}`" if len(text) <= 40 else f"`{text[:37]}…`")
    return ""


def _pattern(path: str) -> re.Pattern[str]:
    parts = [r"[^.]+" if p == "<name>" else re.escape(p) for p in path.replace("[]", "").split(".")]
    return re.compile(r"\.".join(parts) + "$")


def _note_for(patterns: Sequence[re.Pattern[str]], notes: Sequence[tuple[str, str, str]]) -> str:
    for pat in patterns:
        for key, note, file in notes:
            if pat.match(key):
                return f"{note} *(note in `{file}`)*"
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
        Markdown with a heading per schema (the workflow's own, then each paper's section) and the columns key,
        type, default, range, the value in the base configuration (its first occurrence) and meaning: the schema's
        description, else the comment next to the key in a config file (:func:`yaml_comments`), naming the file;
        required keys are marked **bold**.
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
        lines += [f"### {title}", "", f"Schema `{rel}`. {_oneline(schema.get('description', ''))}".rstrip(), "",
                  "| key | type | default | range | in `config/` | meaning |", "|---|---|---|---|---|---|"]
        for k in keys:
            patterns = [] if k.path.endswith(".*") else _candidates(k.path, aliases)
            # a note on a list item's key speaks of that item only: not a meaning of the key
            meaning = k.meaning or ("" if "[]" in k.path else _note_for(patterns, notes))
            key = f"**`{k.path}`**" if k.required else f"`{k.path}`"
            default = _oneline(f"`{k.default}`") if k.default else ""
            value = _value_for(patterns, values)
            meaning = meaning.replace("[", "\\[")  # text, not Markdown links: "[ours]", "[0, 1]"
            lines.append(f"| {key} | {_oneline(k.type)} | {default} | {_oneline(k.range)} | {value} | {meaning} |")
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


# ---------------------------------------------------------------------------------------------------------------
# Results pages from a results tree


def read_claims(results: Path) -> pd.DataFrame | None:
    """``results/tables/claims.csv`` as :func:`fedshift.claims.evaluate_claims` wrote it, or None when absent."""
    path = results / "tables" / "claims.csv"
    if not path.exists():
        return None
    t = pd.read_csv(path, dtype={"paper_value": str}, keep_default_na=False,
                    na_values={c: ["", "nan"] for c in ("ours", "ci_low", "ci_high")})

    def number_or_text(v: str) -> float | str:
        try:
            return float(v)
        except ValueError:
            return v

    t["paper_value"] = [number_or_text(v) for v in t["paper_value"]]
    return t


def verdict_counts(claims: pd.DataFrame) -> pd.DataFrame:
    """Claims per paper and verdict.

    Parameters
    ----------
    claims : DataFrame
        The claims table (:func:`read_claims`).

    Returns
    -------
    DataFrame
        One row per paper (in the claims' order) with the scale(s) and one column per verdict of :data:`VERDICTS`.
    """
    rows = []
    for paper, group in claims.groupby("paper", sort=False):
        counts = group["verdict"].value_counts()
        rows.append({"paper": paper, "scale": ", ".join(sorted(set(group["scale"].astype(str)))),
                     **{v: int(counts.get(v, 0)) for v in VERDICTS}})
    return pd.DataFrame(rows, columns=["paper", "scale", *VERDICTS])


def verdict_counts_markdown(claims: pd.DataFrame) -> str:
    """The verdict counts per paper as a Markdown table (the README's results at a glance).

    Parameters
    ----------
    claims : DataFrame
        The claims table (:func:`read_claims`).
    """
    counts = verdict_counts(claims)
    lines = ["| paper | scale | " + " | ".join(VERDICTS) + " |", "|---|---|" + "---:|" * len(VERDICTS)]
    for r in counts.itertuples(index=False):
        values = list(r)
        lines.append(f"| {values[0]} | {values[1]} | " + " | ".join(str(v) for v in values[2:]) + " |")
    total = counts[list(VERDICTS)].sum()
    lines.append("| **all** | | " + " | ".join(f"**{int(total[v])}**" for v in VERDICTS) + " |")
    return "\n".join(lines) + "\n"


def run_records(results: Path, paper: str) -> list[dict[str, Any]]:
    """The ``run.json`` records of one paper's runs under ``results/runs/<paper>``, sorted by path."""
    return [json.loads(p.read_text()) for p in sorted((results / "runs" / paper).glob("*/*/seed~*/run.json"))]


def provenance(results: Path, paper: str, claims: pd.DataFrame | None = None) -> dict[str, Any]:
    """What produced one paper's results: scale, seeds, rounds and machine, read from its runs and tables.

    Parameters
    ----------
    results : Path
        The results tree.
    paper : str
        The paper's name (its folder under ``results/runs`` and ``results/tables``).
    claims : DataFrame, optional
        The claims table, whose ``scale`` column names the scale; without it (or without claims for the paper), a
        table with a ``rehearsal`` column or a run marked ``scale: rehearsal`` gives "rehearsal", else "unknown".

    Returns
    -------
    dict
        ``scale``, ``runs`` (count), ``seeds`` (sorted distinct seeds), ``rounds`` (sorted distinct values),
        ``machines`` (sorted distinct descriptions: CPU model, torch's instruction-set level, GPU model when used,
        the portable-CPU switch), ``is_result`` (False at rehearsal and smoke scale) and ``commits`` (the git
        commits the runs were made at, shortened).
    """
    records = run_records(results, paper)
    scales = set()
    if claims is not None and paper in set(claims["paper"]):
        scales |= set(claims.loc[claims["paper"] == paper, "scale"].astype(str))
    if any(r.get("scale") == "rehearsal" for r in records):
        scales.add("rehearsal")
    for csv in sorted((results / "tables" / paper).glob("*.csv")):
        if "rehearsal" in _read_csv(csv).columns:
            scales.add("rehearsal")
    machines = set()
    for r in records:
        env = r.get("environment", {})
        cpu = env.get("cpu", {})
        text = f"{cpu.get('model', 'unknown CPU')} ({cpu.get('torch_capability', '?')} kernels)"
        if env.get("gpu"):
            text = f"{env['gpu']} (CUDA {env.get('cuda', '?')}) on {text}"
        text += ", portable-CPU switch " + ("on" if env.get("reproducibility", {}).get("portable_cpu") else "off")
        machines.add(text)
    scale = ", ".join(sorted(scales)) or "unknown"
    return {"scale": scale, "runs": len(records), "seeds": sorted({int(r["seed"]) for r in records if "seed" in r}),
            "rounds": sorted({int(r["rounds"]) for r in records if isinstance(r.get("rounds"), int | float)}),
            "machines": sorted(machines), "is_result": not any(s in NOT_RESULTS for s in scales),
            "commits": sorted({str(r["git_commit"])[:10] for r in records if r.get("git_commit")})}


def _span(values: Sequence[int]) -> str:
    if not values:
        return "–"
    return ", ".join(map(str, values)) if len(values) <= 6 else f"{values[0]}–{values[-1]} ({len(values)} values)"


def provenance_markdown(prov: Mapping[str, Any]) -> str:
    """The admonition that opens a generated results section (scale, runs, seeds, rounds, machine)."""
    kind = "note" if prov["is_result"] else "danger"
    head = f"Made at **{prov['scale']}** scale" if prov["is_result"] else \
        f"**{prov['scale'].upper()} — not a result**: made at {prov['scale']} scale to check the workflow"
    lines = [f'!!! {kind} "Generated from the results tree"', f"    {head}, from {prov['runs']} runs "
             f"(seeds {_span(prov['seeds'])}; rounds {_span(prov['rounds'])}).",
             "    Machine: " + ("; ".join(prov["machines"]) or "not recorded") + ".",
             "    Configuration: the overlays of that scale (see Concepts, Scales) at code version "
             + (", ".join(f"`{c}`" for c in prov.get("commits", [])) or "not recorded")
             + "; every run's resolved hyper-parameters are in its `run.json`."]
    return "\n".join(lines) + "\n"


def _read_csv(path: Path) -> pd.DataFrame:
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
    return _oneline(value)


def csv_markdown(table: pd.DataFrame, max_rows: int = MAX_CSV_ROWS) -> str:
    """A tidy table as Markdown (its first ``max_rows`` rows, cells by :func:`format_cell`)."""
    if table.columns.empty:
        return "*An empty table.*\n"
    shown = table.head(max_rows)
    lines = ["| " + " | ".join(_oneline(c) for c in shown.columns) + " |",
             "|" + "---|" * len(shown.columns)]
    for row in shown.itertuples(index=False):
        lines.append("| " + " | ".join(format_cell(v) for v in row) + " |")
    if len(table) > max_rows:
        lines += ["", f"*The first {max_rows} of {len(table)} rows.*"]
    return "\n".join(lines) + "\n"


def _title(stem: str) -> str:
    return stem.replace("_", " ").capitalize()


def paper_results_markdown(results: Path, paper: str, figure_prefix: str, claims: pd.DataFrame | None = None,
                           heading: str = "###") -> str:
    """One paper's generated results: provenance, every table and every figure of the results tree.

    A table is shown as the pipeline's own Markdown (``<name>.md``, with the paper's published values beside ours
    where the paper's outputs print them) when it exists, else rendered from its tidy csv (:func:`csv_markdown`).
    Every ``.png`` under ``results/figures/<paper>/`` follows as an image.

    Parameters
    ----------
    results : Path
        The results tree.
    paper : str
        The paper's name.
    figure_prefix : str
        URL prefix (relative to the page) under which the site serves ``results/figures`` (see
        :func:`site_figures`).
    claims : DataFrame, optional
        The claims table, for the scale and this paper's verdicts.
    heading : str
        The Markdown heading level of each table and figure.

    Returns
    -------
    str
        Markdown; a sentence naming the target to run when the tree holds nothing of the paper.
    """
    tables = sorted((results / "tables" / paper).glob("*.csv"))
    figures = sorted((results / "figures" / paper).glob("*.png"))
    if not tables and not figures:
        return (f"*Not generated: the results tree `{results.as_posix()}` holds no table or figure of `{paper}`. "
                f"Run `snakemake --cores all {paper} docs` (add `--configfile config/quick.yaml` for the quick "
                "scale); the target `docs` renders this section from what it built.*\n")
    parts = [provenance_markdown(provenance(results, paper, claims))]
    if claims is not None and paper in set(claims["paper"]):
        from fedshift.claims import claims_markdown

        parts += [f"{heading} Verdicts", "", claims_markdown(claims[claims["paper"] == paper])]
    for csv in tables:
        md = csv.with_suffix(".md")
        body = md.read_text() if md.exists() else csv_markdown(_read_csv(csv))
        rel = csv.relative_to(results).as_posix()
        parts += [f"{heading} {_title(csv.stem)}", "", f"*From `results/{rel}`.*", "", body]
    for png in figures:
        rel = png.relative_to(results / "figures").as_posix()
        parts += [f"{heading} {_title(png.stem)} (figure)", "", f"![{png.stem}]({figure_prefix}/{rel})", "",
                  f"*`results/figures/{rel}`*", ""]
    return "\n".join(parts)


def verdicts_markdown(results: Path) -> str:
    """The generated verdicts page body: counts per paper, then every claim (:func:`fedshift.claims.claims_markdown`).

    Parameters
    ----------
    results : Path
        The results tree (reads ``tables/claims.csv``).
    """
    claims = read_claims(results)
    if claims is None:
        return (f"*Not generated: `{results.as_posix()}/tables/claims.csv` does not exist. Run `snakemake --cores all "
                "claims docs` (with the overlay of the scale you want) to check every claim and render this page.*\n")
    from fedshift.claims import claims_markdown

    scales = sorted(set(claims["scale"].astype(str)))
    warn = "" if not any(s in NOT_RESULTS for s in scales) else \
        '!!! danger "Not results"\n    Computed at ' + ", ".join(scales) + " scale: every verdict is *not judged*.\n\n"
    return (warn + "## Counts per paper\n\n" + verdict_counts_markdown(claims) + "\n## Every claim\n\n"
            + claims_markdown(claims))


def benchmark_summary(results: Path) -> pd.DataFrame:
    """The Snakemake ``benchmark:`` files of a results tree, summed per paper and stage.

    Parameters
    ----------
    results : Path
        The results tree (reads ``benchmarks/<paper>/<stage>/**/*.tsv``, Snakemake's columns ``s``, ``max_rss``
        and ``cpu_time``).

    Returns
    -------
    DataFrame
        Columns paper, stage (train, evaluate, experiment), jobs, wall_s (sum), cpu_s (sum) and max_rss_mb (the
        largest); empty when the tree holds no benchmark file.
    """
    rows = []
    for tsv in sorted((results / "benchmarks").glob("*/*/**/*.tsv")):
        parts = tsv.relative_to(results / "benchmarks").parts
        t = pd.read_csv(tsv, sep="\t")
        for r in t.itertuples(index=False):
            rows.append({"paper": parts[0], "stage": parts[1], "s": float(r.s), "cpu": float(r.cpu_time),
                         "rss": float(r.max_rss)})
    cols = ["paper", "stage", "jobs", "wall_s", "cpu_s", "max_rss_mb"]
    if not rows:
        return pd.DataFrame(columns=cols)
    df = pd.DataFrame(rows)
    out = df.groupby(["paper", "stage"], sort=True).agg(jobs=("s", "size"), wall_s=("s", "sum"), cpu_s=("cpu", "sum"),
                                                         max_rss_mb=("rss", "max")).reset_index()
    return out[cols]


def benchmark_records(results: Path) -> dict[str, pd.DataFrame]:
    """The JSON records the benchmark scripts wrote (``benchmarks/*.py --out``) into the results tree.

    Parameters
    ----------
    results : Path
        The results tree (reads ``benchmarks/*.json`` and ``bench/**/*.json``).

    Returns
    -------
    dict of str to DataFrame
        Path under the tree -> its scalar leaves as rows (``key`` dotted, ``value``); lists of scalars are joined.
    """
    out = {}
    files = sorted((results / "benchmarks").glob("*.json")) + sorted((results / "bench").rglob("*.json"))
    for path in files:
        rows = []
        for key, value in _flatten(json.loads(path.read_text())):
            if isinstance(value, list) and all(not isinstance(v, Mapping | list) for v in value):
                value = ", ".join(format_cell(v) for v in value)
            elif isinstance(value, list):
                value = f"{len(value)} entries"
            rows.append({"key": key, "value": value})
        out[path.relative_to(results).as_posix()] = pd.DataFrame(rows, columns=["key", "value"])
    return out


def benchmarks_markdown(results: Path) -> str:
    """The measurements of a results tree as Markdown.

    Every job's (:func:`benchmark_summary`, with the scale per paper), then each benchmark script's record
    (:func:`benchmark_records`).
    """
    summary = benchmark_summary(results)
    records = benchmark_records(results)
    if summary.empty and not records:
        return (f"*Not generated: `{results.as_posix()}/benchmarks` holds no benchmark file. Every training and "
                "evaluation job writes one; build this site after a run (target `docs`).*\n")
    parts = []
    if not summary.empty:
        claims = read_claims(results)
        summary.insert(1, "scale", [provenance(results, p, claims)["scale"] for p in summary["paper"]])
        parts += ["### Jobs", "", csv_markdown(summary, max_rows=len(summary))]
    for rel, table in records.items():
        parts += [f"### `{rel}`", "", f"*Written by the benchmark script that names it; from `results/{rel}`.*", "",
                  csv_markdown(table, max_rows=80)]
    return "\n".join(parts)


def site_figures(results: Path) -> dict[str, Path]:
    """Every figure to publish: site path (under ``generated/figures/``) -> the ``.png`` in the results tree."""
    return {f"generated/figures/{p.relative_to(results / 'figures').as_posix()}": p
            for p in sorted((results / "figures").glob("*/*.png"))}


_MARKER = re.compile(r"<!-- fedshift:(?P<what>[a-z_-]+)(?: (?P<arg>[a-z0-9_]+))? -->")


def expand_markers(markdown: str, *, root: Path, results: Path, page_depth: int) -> str:
    """Replace the generated-content markers of a docs page with their content.

    Markers: ``<!-- fedshift:config-reference -->``, ``<!-- fedshift:verdicts -->``,
    ``<!-- fedshift:results PAPER -->``, ``<!-- fedshift:verdict-counts -->`` and ``<!-- fedshift:benchmarks -->``.

    Parameters
    ----------
    markdown : str
        The page's Markdown.
    root, results : Path
        The repository root and the results tree.
    page_depth : int
        How many folders deep the page lies under ``docs/`` (for the figures' relative URLs).

    Raises
    ------
    ValueError
        On an unknown marker or a results marker without a paper.
    """
    prefix = "/".join([".."] * page_depth + ["generated", "figures"])
    claims = read_claims(results)

    def content(m: re.Match[str]) -> str:
        what, arg = m.group("what"), m.group("arg")
        if what == "config-reference":
            return config_reference(root)
        if what == "verdicts":
            return verdicts_markdown(results)
        if what == "verdict-counts":
            return verdict_counts_markdown(claims) if claims is not None else "*No claims.csv in the results tree.*\n"
        if what == "benchmarks":
            return benchmarks_markdown(results)
        if what == "results" and arg:
            return paper_results_markdown(results, arg, prefix, claims)
        raise ValueError(f"unknown docs marker {m.group(0)!r}")

    return _MARKER.sub(content, markdown)


def generated_pages(root: Path, results: Path, docs: Path) -> Iterator[tuple[str, str]]:
    """Every page of ``docs`` that holds a marker, with its markers expanded: (path under docs, Markdown)."""
    for page in sorted(docs.rglob("*.md")):
        text = page.read_text()
        if _MARKER.search(text):
            rel = page.relative_to(docs)
            yield rel.as_posix(), expand_markers(text, root=root, results=results, page_depth=len(rel.parts) - 1)


def _write(path: Path, content: str | bytes) -> None:
    from fedshift.io import atomic_write

    with atomic_write(path, "wb" if isinstance(content, bytes) else "w") as fh:
        fh.write(content)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m fedshift.docsgen {config,readme,pages} ...``: write the generated blocks and pages.

    Returns
    -------
    int
        0 on success, 1 when ``--check`` finds a block out of date.
    """
    import argparse

    ap = argparse.ArgumentParser(prog="python -m fedshift.docsgen", description=main.__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("config", help="rewrite the config-reference block of config/README.md")
    c.add_argument("file", type=Path)
    c.add_argument("--check", action="store_true", help="only check that the block is up to date")
    r = sub.add_parser("readme", help="rewrite the README's verdict-counts block from RESULTS/tables/claims.csv")
    r.add_argument("file", type=Path)
    r.add_argument("results", type=Path)
    p = sub.add_parser("pages", help="write docs pages with their generated content expanded into OUT")
    p.add_argument("results", type=Path)
    p.add_argument("out", type=Path)
    args = ap.parse_args(argv)
    root = Path(__file__).resolve().parents[2]
    if args.cmd == "config":
        text = args.file.read_text()
        new = rewrite_block(text, CONFIG_BLOCK, config_reference(root))
        if args.check:
            return 0 if new == text else 1
        _write(args.file, new)
    elif args.cmd == "readme":
        claims = read_claims(args.results)
        if claims is None:
            raise FileNotFoundError(f"{args.results}/tables/claims.csv")
        _write(args.file, rewrite_block(args.file.read_text(), README_BLOCK, verdict_counts_markdown(claims)))
    else:
        for rel, text in generated_pages(root, args.results, root / "docs"):
            _write(args.out / rel, text)
        for rel, src in site_figures(args.results).items():
            _write(args.out / rel, src.read_bytes())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
