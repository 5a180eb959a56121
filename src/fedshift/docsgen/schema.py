"""The keys of the configuration's JSON schemas, each with type, default, range and meaning."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedshift.docsgen.text import oneline

__all__ = ["WORKFLOW_SCHEMA", "PAPER_SCHEMAS", "EXTRA_SCHEMAS", "KeyDoc", "schema_keys", "schema_files"]

#: Config sections by schema: the workflow's own (top level) and each paper's (its section's name).
WORKFLOW_SCHEMA = "workflow/schemas/config.schema.yaml"
PAPER_SCHEMAS = "src/fedshift/papers/*/schema.yaml"
EXTRA_SCHEMAS = "src/fedshift/schemas/*.yaml"


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
                              oneline(resolved.get("description", "")), key in required))
            walk(sub, child)
        extra = node.get("additionalProperties")
        if isinstance(extra, Mapping):
            child = f"{path}.<name>" if path else "<name>"
            resolved, _ = _resolve(extra, schema)
            items = resolved.get("items")
            has_items = isinstance(items, Mapping) and bool(_resolve(items, schema)[0].get("properties"))
            if resolved.get("properties") or resolved.get("additionalProperties") or "$ref" in extra or has_items:
                out.append(KeyDoc(child, _type_text(extra, schema), "", _range_text(extra, schema),
                                  oneline(resolved.get("description", "")), False))
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
