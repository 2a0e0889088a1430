"""Every file in tests/data/bad_suites must be refused with exit 2, file:line, dotted path, no traceback.

Each file states what it expects in header comments: `# expect: LINE [PATH] - MESSAGE PART`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import DATA, run_cli
from trtverify.config.loader import load_suite
from trtverify.runner import preflight
from trtverify.util.errors import SuiteError

BAD = DATA / "bad_suites"
EXPECT = re.compile(r"^# expect: (\d+) (?:(\S+) )?- (.+)$")
# files that cannot carry a header comment
SPECIAL = {"empty.yaml": [(1, "", "the file is empty")]}


def expectations(path: Path) -> list[tuple[int, str, str]]:
    if path.name in SPECIAL:
        return SPECIAL[path.name]
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        m = EXPECT.match(line)
        if m:
            out.append((int(m.group(1)), m.group(2) or "", m.group(3)))
    assert out, f"{path.name} has no '# expect:' header"
    return out


CASES = sorted(BAD.glob("*.yaml"))


def test_there_are_many_bad_suites():
    assert len(CASES) >= 25


def _located(name: str, line: int, dotted: str, part: str) -> re.Pattern[str]:
    prefix = re.escape(f"{name}:{line}: ") + (re.escape(f"{dotted}: ") if dotted else "")
    return re.compile(prefix + r".*" + re.escape(part), re.MULTILINE)


@pytest.mark.parametrize("path", CASES, ids=[p.name for p in CASES])
def test_bad_suite_is_located_in_process(path: Path):
    with pytest.raises(SuiteError) as info:
        preflight(load_suite(path))
    text = str(info.value)
    for line, dotted, part in expectations(path):
        assert _located(path.name, line, dotted, part).search(text.replace(str(path), path.name)), text


@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize("path", CASES, ids=lambda p: p.name)
def test_bad_suites_from_the_command_line(command: str, path: Path, tmp_path: Path):
    # a process per file and command (a case each, so parallel workers share them): exit 2, located, no traceback
    args = [command, path.name] + (["--out", str(tmp_path / path.stem)] if command == "run" else [])
    r = run_cli(*args, cwd=BAD)
    assert r.code == 2, (path.name, r.code, r.err)
    assert "Traceback" not in r.err + r.out, (path.name, r.err)
    for line, dotted, part in expectations(path):
        assert _located(path.name, line, dotted, part).search(r.err), (path.name, r.err)
    assert not (tmp_path / path.stem / "results.json").exists(), "no work may start on an invalid suite"


def test_all_problems_are_reported_at_once():
    with pytest.raises(SuiteError) as info:
        load_suite(BAD / "missing_candidate_and_input_file.yaml")
    assert len(info.value.problems) == 2
