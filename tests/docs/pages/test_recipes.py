"""The recipes of docs/development.md ("Add a task / stage / metric / backend / log family / plugin") name only what
exists. Each recipe's `Examples:` line gives its placeholders' values (`<name>` = `depth`, ...); for each example, every
span in backticks is put through them and checked: a path (a file, a folder, `file#anchor`, `file::test`) exists, a
`module:attribute` imports, a word or `Class.field` is an attribute, field or annotation of a module or class the recipe
names, or a name in a registry it names (`TASKS`, `METRICS`, `BUILTIN`, ...). A span with spaces (a command, YAML) has
its repository paths checked. Also: every field of StageEntry / TaskEntry / BackendEntry and every abstract method of
Task / Backend is named in its recipe, and every file of the keypoints diff stat the task recipe shows is one it names.
In-process; the modules a recipe names are imported (no torch, no TensorRT)."""

from __future__ import annotations

import dataclasses
import importlib
import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from trtverify.util.registry import Registry

PAGE = ROOT / "docs" / "development.md"
TOP = ("trtverify/", "tests/", "docs/", "demo/", "suites/", "bench/", "constraints/")
SPAN = re.compile(r"`([^`\n]+)`")
PLACEHOLDER = re.compile(r"<(\w+)>")
MODULE_ATTR = re.compile(r"^([a-z_]\w*(?:\.\w+)+):(\w+(?:\.\w+)*)$")
IDENT = re.compile(r"^[A-Za-z_]\w*(?:\.\w+)*$")
FILE = re.compile(r"^[\w.-]*\w\.(?:py|md|yaml|yml|json|j2|toml|txt|onnx|npz|pt|log|cfg)$")
WANTED = {"task", "stage", "metric", "backend", "log family", "plugin"}


def recipes(text: str) -> dict[str, str]:
    """'### Add a ...' sections of the Recipes section, by their heading."""
    part = text.split("\n## Recipes\n", 1)[1].split("\n## ", 1)[0]
    return {m.group(1).strip(): m.group(2) for m in re.finditer(r"^### ([^\n]+)\n(.*?)(?=^### |\Z)", part, re.M | re.S)}


def examples(body: str) -> list[dict[str, str]]:
    """The placeholder values of each example the recipe's `Examples:` paragraph gives."""
    m = re.search(r"^Examples?: (.+?)(?:\n\n|\Z)", body, re.M | re.S)
    assert m, "a recipe without its Examples: line"
    out = [dict(re.findall(r"`<(\w+)>` = `([^`]+)`", part)) for part in m.group(1).split(";")]
    assert all(out), f"an example without placeholder values: {m.group(1)!r}"
    return out


def slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchor_ok(path: Path, anchor: str) -> bool:
    heads = re.findall(r"^#+ (.+)$", path.read_text(encoding="utf-8"), re.M)
    return anchor in {slug(h) for h in heads}


def _test_ok(path: Path, name: str) -> bool:
    return re.search(rf"^def {re.escape(name)}\(", path.read_text(encoding="utf-8"), re.M) is not None


def check_path(span: str) -> str | None:
    """Why the path `span` (maybe with #anchor or ::test) is wrong, or None."""
    rel, _, test = span.partition("::")
    rel, _, anchor = rel.partition("#")
    path = ROOT / rel
    if not path.exists():
        return f"{rel}: no such file or folder"
    if anchor and not _anchor_ok(path, anchor):
        return f"{rel}: no heading #{anchor}"
    if test and not _test_ok(path, test):
        return f"{rel}: no test {test}"
    return None


def has(obj: Any, name: str) -> bool:
    """An attribute, a dataclass or pydantic field, or an annotation (ClassVar) of `obj` or its bases."""
    if hasattr(obj, name):
        return True
    if dataclasses.is_dataclass(obj) and name in {f.name for f in dataclasses.fields(obj)}:
        return True
    if name in (getattr(obj, "model_fields", None) or {}):
        return True
    return any(name in vars(k).get("__annotations__", {}) for k in getattr(obj, "__mro__", ()))


def resolve(obj: Any, dotted: str) -> bool:
    for part in dotted.split("."):
        if not has(obj, part):
            return False
        obj = getattr(obj, part, None)
    return True


def names_in(obj: Any) -> set[str]:
    """The names a registry or table holds."""
    if isinstance(obj, Registry):
        return set(obj.names())
    return {k for k in obj if isinstance(k, str)} if isinstance(obj, dict) else set()


def module_of(span: str) -> str | None:
    if span.endswith(".py") and span.startswith("trtverify/"):
        return span.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    m = MODULE_ATTR.match(span)
    return m.group(1) if m else None


def problems(body: str, values: dict[str, str]) -> list[str]:
    """What the recipe `body` names that does not exist, with the placeholders put to `values`."""
    spans, out = [], []
    text = re.sub(r"^Examples?: .+?(?:\n\n|\Z)", "", body, count=1, flags=re.M | re.S)
    for raw in SPAN.findall(text):
        unknown = set(PLACEHOLDER.findall(raw)) - set(values)
        if unknown:
            out.append(f"{raw}: placeholder {sorted(unknown)} has no value in the example")
            continue
        spans.append(PLACEHOLDER.sub(lambda m: values[m.group(1)], raw))
    modules = []
    for span in spans:  # every module the recipe names: the namespaces its words resolve in
        name = module_of(span)
        if name and (MODULE_ATTR.match(span) or (ROOT / span).is_file()):  # a missing file is said once, below
            try:
                modules.append(importlib.import_module(name))
            except ImportError as exc:
                out.append(f"{span}: module {name} does not import ({exc})")
    registries = set()
    for span in spans:
        if IDENT.match(span) and not FILE.match(span):
            for mod in modules:
                if resolve(mod, span):
                    registries |= names_in(getattr(mod, span.split(".")[0]))
    for span in spans:
        why = None
        if " " in span:  # a command or YAML: its repository paths
            for token in span.split():
                token = token.strip("'\"(),;")
                if token.startswith(TOP) and not PLACEHOLDER.search(token):
                    why = why or check_path(token.rstrip("."))
        elif m := MODULE_ATTR.match(span):
            mod = next((x for x in modules if x.__name__ == m.group(1)), None)
            if mod is not None and not resolve(mod, m.group(2)):
                why = f"{span}: {m.group(1)} has no {m.group(2)}"
        elif "/" in span or "#" in span or FILE.match(span) or (ROOT / span).is_file():
            why = check_path(span)
        elif IDENT.match(span):
            if not any(resolve(mod, span) for mod in modules) and span not in registries:
                named = ", ".join(sorted({m.__name__ for m in modules}))
                why = f"{span}: not an attribute of a module the recipe names ({named}) nor in a registry it names"
        else:
            why = f"{span}: neither a path, a module:attribute, a name nor a command"
        if why:
            out.append(why)
    return out


RECIPES = recipes(PAGE.read_text(encoding="utf-8"))


def test_every_recipe_is_there():
    found = {re.sub(r"^Add an? |\s*\(.*$", "", h).removeprefix("tensor ").removesuffix(" reference") for h in RECIPES}
    assert WANTED <= found, sorted(WANTED - found)


@pytest.mark.parametrize("heading", sorted(RECIPES))
def test_a_recipe_names_only_what_exists(heading: str):
    body = RECIPES[heading]
    for values in examples(body):
        assert not problems(body, values), (values, problems(body, values))


def test_the_check_finds_what_does_not_exist():
    planted = """Examples: `<name>` = `depth`, `<Name>` = `Depth`.

- `trtverify/tasks/<name>.py`: `<Name>Task`, `Task.worst_type`, `TaskEntry.lower_is_better`, `TASKS`, `keypoints`.
- `trtverify/config/registry.py` and `trtverify/tasks/base.py`; `trtverify.tasks.<name>:<Name>Options`.
- wrong: `trtverify/tasks/<name>_nosuch.py`, `trtverify.tasks.<name>:<Name>Nosuch`, `TaskEntry.nosuch`,
  `NOSUCH_REGISTRY`, `docs/stages/e2e.md#no-such-heading`, `tests/tasks/test_depth.py::test_nosuch`,
  `trtverify schema > suites/nosuch.schema.json`, `<other>`, `trtverify.nosuch_module:X`.
"""
    found = problems(planted, examples(planted)[0])
    for wrong in (
        "trtverify/tasks/depth_nosuch.py",
        "DepthNosuch",
        "TaskEntry.nosuch",
        "NOSUCH_REGISTRY",
        "no-such-heading",
        "test_nosuch",
        "suites/nosuch.schema.json",
        "<other>",
        "nosuch_module",
    ):
        assert sum(wrong in p for p in found) >= 1, (wrong, found)
    assert len(found) == 9, found  # and nothing the right half names


def test_the_last_task_touched_only_what_the_task_recipe_names():
    """The diff stat the task recipe shows (keypoints' merge): each file in it is one the recipe names, or under a
    folder it names, with the recipe's keypoints values put in."""
    heading = next(h for h in RECIPES if h.startswith("Add a task"))
    body = RECIPES[heading]
    values = next(v for v in examples(body) if v["name"] == "keypoints")
    named = {PLACEHOLDER.sub(lambda m: values[m.group(1)], s).partition("#")[0] for s in SPAN.findall(body)}
    stat = re.search(r"```text\n(.*?)```", body, re.S)
    assert stat, "the task recipe shows no diff stat"
    touched = re.findall(r"^ (\S+) +\|", stat.group(1), re.M)
    assert len(touched) >= 10
    outside = [f for f in touched if f not in named and not any(f.startswith(d) for d in named if d.endswith("/"))]
    assert not outside, f"the recipe does not name {outside}"
    assert all((ROOT / f).exists() for f in touched)


def test_the_recipes_name_every_field_and_abstract_method_of_what_they_fill_in():
    """A field added to a registry entry, or an abstract method added to Task or Backend, shows up in its recipe."""
    from trtverify.backends.base import Backend
    from trtverify.config.registry import BackendEntry, StageEntry, TaskEntry
    from trtverify.tasks.base import Task
    from trtverify.util.registry import Entry

    base = {f.name for f in dataclasses.fields(Entry)}
    wanted = {
        "Add a stage": [f"StageEntry.{f.name}" for f in dataclasses.fields(StageEntry) if f.name not in base],
        "Add a task (e2e)": [f"TaskEntry.{f.name}" for f in dataclasses.fields(TaskEntry) if f.name not in base]
        + [f"Task.{m}" for m in sorted(Task.__abstractmethods__)]
        + [f"Task.{c}" for c in ("name", "metrics_type", "per_class_type", "worst_type", "reads_arrays", "read")],
        "Add a backend": [f"BackendEntry.{f.name}" for f in dataclasses.fields(BackendEntry) if f.name not in base]
        + [f"Backend.{m}" for m in sorted(Backend.__abstractmethods__)],
    }
    for heading, names in wanted.items():
        spans = set(SPAN.findall(RECIPES[heading]))
        missing = [n for n in names if n not in spans]
        assert not missing, (heading, missing)
    assert len(wanted["Add a stage"]) >= 12 and len(wanted["Add a task (e2e)"]) >= 15
