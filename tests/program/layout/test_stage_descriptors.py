"""One stage, one descriptor (issue 48): every fact the run plan, the merge and the report need about a stage is in
its registry entry (`trtverify/config/registry.py`, `StageEntry`), so runner.py, results/merge.py and report/ name
no stage, and a new stage is a config module, a stage module, a report module and a template partial. The source
is walked with `ast`; the descriptors are resolved for real."""

from __future__ import annotations

import ast
import re
import typing
from pathlib import Path

import pytest

from tests.conftest import ROOT
from trtverify.config.registry import STAGES
from trtverify.config.stages import Stages

PACKAGE = ROOT / "trtverify"
TEMPLATES = PACKAGE / "report" / "templates"
# the modules that run, merge and report every stage: none of them may single one out
GENERIC = [PACKAGE / "runner.py", PACKAGE / "results" / "merge.py", *sorted((PACKAGE / "report").glob("*.py"))]


def stage_names_in(path: Path, names: typing.Collection[str]) -> list[str]:
    """Where a module names a stage: a string constant that is a stage's name (`name == "e2e"`), or an attribute of
    that name (`suite.stages.e2e`), as 'line: what'."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
            found.append(f"{node.lineno}: {node.value!r}")
        elif isinstance(node, ast.Attribute) and node.attr in names:
            found.append(f"{node.lineno}: .{node.attr}")
    return found


def test_runner_merge_and_report_name_no_stage():
    assert len(GENERIC) > 10 and PACKAGE / "report" / "text.py" in GENERIC
    named = {str(p.relative_to(ROOT)): hits for p in GENERIC if (hits := stage_names_in(p, STAGES.names()))}
    assert not named, f"these modules name a stage: put the fact in its StageEntry instead: {named}"


def test_the_report_template_names_no_stage():
    text = (TEMPLATES / "report.html.j2").read_text(encoding="utf-8")
    names = "|".join(STAGES.names())
    quoted = re.findall(rf"""["']({names})["']""", text)
    assert "s.name ==" not in text and not quoted, quoted


def test_the_detector_finds_a_stage_named(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text('def f(suite, name):\n    return name == "e2e" or suite.stages.layerwise\n')
    assert sorted(stage_names_in(planted, STAGES.names())) == ["2: 'e2e'", "2: .layerwise"]
    assert stage_names_in(planted, ["perf"]) == []


def test_every_suite_section_has_a_descriptor_and_back():
    assert STAGES.names() == list(Stages.model_fields)


@pytest.mark.parametrize("name", STAGES.names())
def test_each_descriptor_resolves_to_what_it_says(name):
    entry = STAGES.get(name)
    # its config model is the type of its section in the suite
    assert entry.config_type() in typing.get_args(Stages.model_fields[name].annotation)
    # its result record carries its name
    assert entry.result_type().model_fields["name"].default == name
    assert callable(entry.load())
    for hook in (entry.merger(), entry.liner()):
        assert hook is None or callable(hook)
    for template in (entry.partial, entry.causes):
        assert template is None or (TEMPLATES / template).is_file(), template
    # a stage split per candidate compares candidates; one swept by batch size has batch sizes to sweep
    if entry.cases == "candidates":
        assert "candidates" in entry.config_type().model_fields
    if entry.batch_swept:
        assert {"batch_size", "batch_sizes"} <= set(entry.config_type().model_fields)
    assert entry.weight >= 1
