"""The suite reference (docs/suite-reference.md), generated from the JSON Schema of the suite models,
so it cannot drift from what the loader accepts: `trtverify schema --markdown > docs/suite-reference.md`."""

from __future__ import annotations

import json
from typing import Any

from trtverify.config.models import Suite

Schema = dict[str, Any]


def suite_schema() -> Schema:
    schema = Suite.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "trtverify suite"
    return schema


def _deref(node: Schema, defs: Schema) -> Schema:
    while "$ref" in node:
        node = {**defs[node["$ref"].split("/")[-1]], **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _type(node: Schema, defs: Schema) -> str:
    """A short readable type: 'string', 'number or null', 'list of Check', 'map of Candidate or string'."""
    node = _deref(node, defs) if "$ref" not in node else node
    if "$ref" in node:
        return node["$ref"].split("/")[-1]
    for key in ("anyOf", "oneOf"):
        if key in node:
            return " or ".join(dict.fromkeys(_type(n, defs) for n in node[key]))
    if "enum" in node:
        return "one of " + ", ".join(json.dumps(v) for v in node["enum"])
    if "const" in node:
        return json.dumps(node["const"])
    kind = node.get("type", "any")
    if kind == "array":
        if "prefixItems" in node:
            return "[" + ", ".join(_type(n, defs) for n in node["prefixItems"]) + "]"
        return "list of " + _type(node.get("items", {}), defs)
    if kind == "object":
        values = node.get("additionalProperties") or next(iter(node.get("patternProperties", {}).values()), None)
        if isinstance(values, dict):
            return "map of " + _type(values, defs)
        return "mapping"
    if kind == "string" and node.get("format") == "path":
        return "path"
    return str(kind)


def _objects(node: Schema, defs: Schema) -> list[tuple[str, str]]:
    """(suffix, model name) of the object models a field holds:
    ('', 'Models'), ('[]', 'Check'), ('.NAME', 'Candidate')."""
    if "$ref" in node:
        return [("", node["$ref"].split("/")[-1])]
    out: list[tuple[str, str]] = []
    for key in ("anyOf", "oneOf"):
        for n in node.get(key, []):
            out += _objects(n, defs)
    if node.get("type") == "array" and isinstance(node.get("items"), dict):
        out += [("[]" + s, m) for s, m in _objects(node["items"], defs)]
    if node.get("type") == "object":
        values = node.get("additionalProperties") or next(iter(node.get("patternProperties", {}).values()), None)
        if isinstance(values, dict):
            out += [(".NAME" + s, m) for s, m in _objects(values, defs)]
    return out


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _section(path: str, model: str, defs: Schema, out: list[str], seen: set[tuple[str, str]]) -> None:
    if (path, model) in seen:
        return
    seen.add((path, model))
    node = defs[model] if model in defs else None
    if node is None:
        return
    required = set(node.get("required", []))
    out += [f"## `{path}`" if path else "## The top level", ""]
    if node.get("description"):
        out += [" ".join(node["description"].split()), ""]
    out += ["| key | type | default | description |", "|---|---|---|---|"]
    children: list[tuple[str, str]] = []
    for key, field in node.get("properties", {}).items():
        default = (
            "**required**" if key in required else f"`{json.dumps(field['default'])}`" if "default" in field else ""
        )
        out.append(
            f"| `{key}` | {_cell(_type(field, defs))} | {_cell(default)} | {_cell(field.get('description', ''))} |"
        )
        children += [(f"{path}.{key}{suffix}".lstrip("."), m) for suffix, m in _objects(field, defs)]
    out.append("")
    for child_path, child_model in children:
        _section(child_path, child_model, defs, out, seen)


def markdown() -> str:
    schema = suite_schema()
    defs = schema.get("$defs", {})
    out = [
        "# Suite file reference",
        "",
        "Generated from the suite schema (`trtverify schema --markdown > docs/suite-reference.md`; a test keeps",
        "this file in step with the code). Every key of a suite file, where it goes, its type, its default and",
        "what it does. Unknown keys are errors. `NAME` stands for a name you choose (a candidate, an input, an",
        "output); `[]` for an item of a list. Relative paths are relative to the suite file's folder. The same",
        "schema as JSON, for editor completion: `suites/suite.schema.json` (`trtverify schema`).",
        "",
    ]
    top = dict(schema)
    top_defs = {**defs, "Suite": top}
    _section("", "Suite", top_defs, out, set())
    return "\n".join(out).rstrip() + "\n"


def missing_descriptions() -> list[str]:
    """Fields without a description (the reference would say nothing about them)."""
    schema = suite_schema()
    missing = []
    for name, node in [("Suite", schema), *schema.get("$defs", {}).items()]:
        for key, field in node.get("properties", {}).items():
            if not field.get("description"):
                missing.append(f"{name}.{key}")
    return missing
