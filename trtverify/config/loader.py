"""Load and validate a suite file, reporting every problem with file, line and dotted path."""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from trtverify.config.models import Suite
from trtverify.config.postprocess import postprocess_problems
from trtverify.config.registry import TASKS
from trtverify.config.stages import RISE_LIMITS, gate_direction
from trtverify.config.yamlload import LocatedDocument, PathKey, dotted, load_yaml
from trtverify.util.errors import Problem, SuiteError, unknown


@dataclass(frozen=True)
class LoadedSuite:
    suite: Suite
    path: Path
    doc: LocatedDocument

    @property
    def search_path(self) -> list[Path]:
        """Where 'module:callable' hooks are imported from: python_path, else the suite's folder."""
        return [Path(p) for p in self.suite.python_path] or [self.path.resolve().parent]

    def problem(self, loc: PathKey, message: str) -> Problem:
        return Problem(self.doc.file, self.doc.line_of(loc), dotted(loc), message)


def _unwrap(tp: Any) -> Any:
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            tp = args[0] if len(args) == 1 else tp
            if len(args) != 1:
                return tp
        else:
            return tp


def _model_at(loc: PathKey) -> type[BaseModel] | None:
    """The pydantic model class that validates the mapping at `loc`, if one does."""
    tp: Any = Suite
    for part in loc:
        tp = _unwrap(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            if not isinstance(part, str) or part not in tp.model_fields:
                return None
            tp = tp.model_fields[part].annotation
            continue
        origin = typing.get_origin(tp)
        if origin in (list, tuple) and isinstance(part, int):
            tp = typing.get_args(tp)[0]
        elif origin is dict:
            tp = typing.get_args(tp)[1]
        else:
            return None
    tp = _unwrap(tp)
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def _message(err: dict[str, Any]) -> str:
    kind = err["type"]
    loc = tuple(err["loc"])
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1])
        return unknown("key", str(loc[-1]), list(model.model_fields)) if model else f"unknown key '{loc[-1]}'"
    if kind == "missing":
        return "required key is missing"
    msg = str(err["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    if kind not in ("value_error", "assertion_error") and "input" in err:
        value = err["input"]
        if isinstance(value, (str, int, float, bool)) or value is None:
            msg += f", got {value!r}"
        else:
            msg += f", got a {type(value).__name__}"
    return msg


def _semantic_problems(suite: Suite, doc: LocatedDocument) -> list[Problem]:
    """Cross-field rules that pydantic cannot place on a precise path."""
    out: list[Problem] = []

    def add(loc: PathKey, message: str) -> None:
        out.append(Problem(doc.file, doc.line_of(loc), dotted(loc), message))

    fw = suite.stages.framework
    if fw is not None and suite.models.pytorch is None:
        add(("stages", "framework"), "stage 'framework' compares PyTorch with ONNX Runtime: add models.pytorch")
    if fw is not None:
        for name in fw.ignore:
            if name in fw.outputs:
                add(("stages", "framework", "outputs", name), f"output '{name}' is both ignored and given checks")
        targets = list(fw.rename.values())
        for t in sorted({t for t in targets if targets.count(t) > 1}):
            add(("stages", "framework", "rename"), f"two outputs are renamed to '{t}'")
    rp = suite.stages.repair
    if rp is not None and rp.target == "e2e" and suite.stages.e2e is None:
        add(("stages", "repair", "target"), "target: e2e uses the e2e stage's gates: add stages.e2e")
    e2e = suite.stages.e2e
    against_reference = e2e is not None and any(
        any(getattr(g, k) is not None for k in ("max_drop", "max_rel_drop", "min", *RISE_LIMITS)) for g in e2e.gates
    )
    if rp is not None and rp.target == "e2e" and e2e is not None and not against_reference:
        why = "every e2e gate has only max_drop_vs_baseline: give one max_drop, max_rel_drop, min or max_rise"
        add(("stages", "repair", "target"), f"target: e2e gates the repaired model against the reference, and {why}")
    if rp is not None and rp.target == "e2e" and e2e is not None and not TASKS.get(e2e.task).labels:
        why = f"task {e2e.task} measures a candidate against the reference's outputs in stage e2e"
        add(("stages", "repair", "target"), f"target: e2e scores one model at a time against labels; {why}: use "
            "target: tensors")  # fmt: skip
    if rp is not None and rp.candidate is not None and rp.candidate not in suite.models.candidates:
        add(("stages", "repair", "candidate"), unknown("candidate", rp.candidate, list(suite.models.candidates)))
    lw = suite.stages.layerwise
    if lw is not None:
        names = suite.candidates_of(lw)
        if not suite.models.candidates:
            add(
                ("stages", "layerwise"),
                "stage 'layerwise' compares candidates with the reference: add models.candidates",
            )
        for i, name in enumerate(lw.candidates or []):
            if name not in suite.models.candidates:
                add(("stages", "layerwise", "candidates", i), unknown("candidate", name, list(suite.models.candidates)))
        for name in lw.candidate_checks:
            if name not in names:
                add(("stages", "layerwise", "candidate_checks", name), unknown("candidate", name, names))
    e2e = suite.stages.e2e
    if e2e is not None:
        if not suite.models.candidates:
            add(("stages", "e2e"), "stage 'e2e' compares candidates with the reference: add models.candidates")
        for i, name in enumerate(e2e.candidates or []):
            if name not in suite.models.candidates:
                add(("stages", "e2e", "candidates", i), unknown("candidate", name, list(suite.models.candidates)))
        task = TASKS.get(e2e.task)
        source = e2e.dataset.source
        if source not in task.datasets:
            reads = " or ".join(f"dataset.{d}" for d in task.datasets)
            add(("stages", "e2e", "dataset", source), f"task '{e2e.task}' reads {reads}, not dataset.{source}")
        for key, message in postprocess_problems(e2e.postprocess, e2e.task):
            add(("stages", "e2e", "postprocess", *key), message)
        known = list(e2e.gate_metrics())
        for i, g in enumerate(e2e.gates):
            if g.metric not in known:
                add(("stages", "e2e", "gates", i, "metric"), unknown(f"{e2e.task} metric", g.metric, known))
            elif wrong := gate_direction(g, g.metric in task.lower_is_better):
                add(("stages", "e2e", "gates", i), wrong)
    for stage in ("perf",):  # a capture holds the kit's feeds: stages layerwise and e2e compare it (issue 46)
        cfg = getattr(suite.stages, stage)
        captured = [] if cfg is None else [n for n in suite.candidates_of(cfg) if _captured(suite, n)]
        if captured:
            add(("stages", stage, "candidates"), f"{', '.join(captured)}: captured on another machine, compared by "
                "stages layerwise and e2e only (docs/captured.md); list the other candidates in stages."
                f"{stage}.candidates")  # fmt: skip
    if rp is not None and rp.candidate is not None and _captured(suite, rp.candidate):
        add(("stages", "repair", "candidate"), f"{rp.candidate}: captured on another machine; repair needs an ONNX "
            "candidate it can run")  # fmt: skip
    bl = suite.stages.buildlog
    if bl is not None:
        from trtverify.config.findings import CATEGORIES, KINDS, known

        names = list(CATEGORIES) + list(KINDS)
        for i, name in enumerate(bl.fail_on):
            if not known(name):
                add(("stages", "buildlog", "fail_on", i), unknown("finding category or kind", name, names))
        for name, value in bl.max.items():
            if not known(name):
                add(("stages", "buildlog", "max", name), unknown("finding category or kind", name, names))
            if value < 0:
                add(("stages", "buildlog", "max", name), f"must be >= 0, got {value}")
    return out


def _captured(suite: Suite, name: str) -> bool:
    c = suite.models.candidates.get(name)
    return c is not None and c.captured is not None


def load_suite(path: str | Path, *, check_files: bool = True) -> LoadedSuite:
    """Parse and validate a suite file; raise SuiteError listing every problem found."""
    path = Path(path)
    display = str(path)
    doc = load_yaml(path, display)
    context = {"base_dir": path.resolve().parent, "check_files": check_files}
    try:
        suite = Suite.model_validate(doc.data, context=context)
    except ValidationError as exc:
        raise SuiteError(_schema_problems(exc, doc)) from None
    problems = _semantic_problems(suite, doc)
    if problems:
        raise SuiteError(problems)
    return LoadedSuite(_with_plugins(suite, path), path, doc)


def _schema_problems(exc: ValidationError, doc: LocatedDocument) -> list[Problem]:
    return [
        Problem(doc.file, doc.line_of(tuple(e["loc"])), dotted(tuple(e["loc"])), _message(e))
        for e in exc.errors(include_url=False)
    ]


def _without(data: Any, locs: list[PathKey]) -> Any:
    """A copy of the document without the deepest mapping key of each location (an unknown key, a wrong value):
    what is left may validate, and the checks past the schema can then run on it."""
    import copy

    data = copy.deepcopy(data)
    for loc in locs:
        node, parent, key = data, None, None
        for part in loc:
            if isinstance(node, dict) and part in node:
                parent, key, node = node, part, node[part]
            elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
                node = node[part]  # list items stay: removing one would move the items (and lines) after it
            else:
                break
        if parent is not None and key in parent:
            del parent[key]
    return data


def suite_problems(path: str | Path) -> tuple[LoadedSuite | None, list[Problem]]:
    """Every problem of a suite file that `load_suite` finds, all at once (`trtverify validate`), and the suite
    to check against its models where there is one: past schema problems, the keys they are at are left out and
    the rest validated again, so a wrong key does not hide a typo elsewhere. None where the rest does not
    validate either (its problems would be those of the left-out keys)."""
    path = Path(path)
    try:
        doc = load_yaml(path, str(path))
    except SuiteError as exc:
        return None, exc.problems
    context = {"base_dir": path.resolve().parent, "check_files": True}
    problems: list[Problem] = []
    try:
        suite = Suite.model_validate(doc.data, context=context)
    except ValidationError as exc:
        problems = _schema_problems(exc, doc)
        try:
            rest = _without(doc.data, [tuple(e["loc"]) for e in exc.errors(include_url=False)])
            suite = Suite.model_validate(rest, context=context)
        except ValidationError:
            return None, problems
    seen = {str(p) for p in problems}
    problems += [p for p in _semantic_problems(suite, doc) if str(p) not in seen]
    return LoadedSuite(_with_plugins(suite, path), path, doc), problems


def _with_plugins(suite: Suite, path: Path, extra: dict[str, str] | None = None) -> Suite:
    """The suite's plugin references (and `extra`, from the command line: found in the current folder) handed to
    ONNX Runtime's options, which every ONNX Runtime backend is given."""
    if not suite.plugins and not extra:
        return suite
    search = [str(p) for p in suite.python_path] or [str(path.resolve().parent)]
    if extra:
        search.append(str(Path.cwd()))
    plugins = {**suite.plugins, **(extra or {})}
    ort = suite.backends.onnxruntime.model_copy(update={"plugins": plugins, "plugin_path": search})
    backends = suite.backends.model_copy(update={"onnxruntime": ort})
    return suite.model_copy(update={"backends": backends, "plugins": plugins})


def with_plugins(loaded: LoadedSuite, extra: dict[str, str]) -> LoadedSuite:
    """`loaded` with `--plugin` references over its own `plugins:`."""
    if not extra:
        return loaded
    return LoadedSuite(_with_plugins(loaded.suite, loaded.path, extra), loaded.path, loaded.doc)
