"""Executable docs (issue 26): every command line in README.md and docs/ (docs/stages too) runs against the
demo's files and must exit as the text beside it says; every example output is produced and compared, or
marked as an illustration.

A page says what its lines need in an HTML comment right before the fenced block (hidden when rendered):
YAML keyed by a unique substring of a line of the block; a line exits 0 unless its mark says otherwise:

    <!-- docs-run
    "--backend tensorrt": {skip: "needs TensorRT and an NVIDIA GPU"}
    "model_int8.onnx --inputs": {exit: 1, why: "the demo's INT8 candidate misses rel_l2<=0.01"}
    "--pytorch": {needs: torch}
    -->

`skip: REASON` in place of a key skips every line of the block. A block of example output gets
`output-of: COMMAND` (run at that point of the page; each line of the block must appear in a line of its
stdout + stderr, whitespace-normalised, `...` standing for any text; `exit`/`why` as for a line) or
`illustration: WHY`. Each page runs, in order, in a fresh folder that tests/data/docrun/map.yaml fills
(files under the docs' names, placeholder values, setup commands); synopsis lines too: brackets dropped,
the first of `a|b`, `...` dropped. Lines run with `bash -c`, this interpreter's bin folder first on PATH
and $REPO the repository root.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
DOCRUN = ROOT / "tests" / "data" / "docrun"
MAP = DOCRUN / "map.yaml"
BIN = os.path.dirname(sys.executable)
TIMEOUT_S = 180

SHELL_LANGS = ("sh", "bash", "console", "")
FENCE = re.compile(r"^\s*```(\S*)\s*$")
MARK_OPEN = "<!-- docs-run"
# the words a command line starts with; an unlabelled block whose first line starts with one holds commands
COMMAND_WORDS = ("trtverify", "make", "pip", "python", "python3", "mkdir", "export", "cd", "bash", "polygraphy")
COMMAND_PREFIXES = ("$ ", ".venv/", "./")
LINE_KEYS = {"skip", "exit", "why", "needs"}
OUTPUT_KEYS = {"output-of", "illustration", "exit", "why", "needs"}
NEEDS = {"torch"}


@dataclass
class Block:
    page: str
    lineno: int  # of the opening fence
    lang: str
    lines: list[tuple[int, str]]  # (line number, text)
    mark: dict = field(default_factory=dict)

    @property
    def is_commands(self) -> bool:
        if self.lang in ("sh", "bash", "console"):
            return True
        first = next((t.strip() for _, t in self.lines if t.strip()), "")
        return self.lang == "" and _is_command(first)


@dataclass
class Step:
    """One thing to run, in page order: a command line, or the command an output block shows."""

    page: str
    lineno: int
    text: str  # as in the page (continuations joined)
    spec: dict  # skip / exit / why / needs (and output-of, with `expect` the block's lines)
    expect: list[str] | None = None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.lineno}"


def _is_command(line: str) -> bool:
    return line.startswith(COMMAND_PREFIXES) or line.split(" ", 1)[0] in COMMAND_WORDS


def _rel(page: Path) -> str:
    return str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else str(page)


def parse_page(page: Path) -> tuple[list[Block], list[str]]:
    """The fenced blocks of a page with the mark before each, and what is wrong with the marks."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    problems: list[str] = []
    pending: tuple[int, dict] | None = None  # (line number of the mark, its YAML)
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.strip().startswith(MARK_OPEN):
            if pending:
                problems.append(f"{_rel(page)}:{pending[0]}: a docs-run mark not followed by a fenced block")
            start = i
            first = line.strip()[len(MARK_OPEN) :]
            body = [first.split("-->", 1)[0]]  # a mark may be one line: <!-- docs-run {skip: why} -->
            while "-->" not in first and i + 1 < len(lines) and "-->" not in lines[i + 1]:
                i += 1
                body.append(lines[i])
            i += "-->" not in first
            try:
                mark = yaml.safe_load("\n".join(body)) or {}
            except yaml.YAMLError as exc:
                problems.append(f"{_rel(page)}:{start + 1}: the docs-run mark is not YAML: {exc}")
                mark = {}
            if not isinstance(mark, dict):
                problems.append(f"{_rel(page)}:{start + 1}: the docs-run mark is not a mapping")
                mark = {}
            pending = (start + 1, mark)
            i += 1
            continue
        m = FENCE.match(line)
        if m:
            start = i
            body = []
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                body.append((i + 1, lines[i]))
                i += 1
            block = Block(_rel(page), start + 1, m.group(1), body)
            if pending:
                if block.lang not in SHELL_LANGS:
                    problems.append(f"{block.page}:{pending[0]}: a docs-run mark before a {block.lang} block")
                block.mark = pending[1]
                pending = None
            blocks.append(block)
        elif line.strip() and pending:
            problems.append(f"{_rel(page)}:{pending[0]}: a docs-run mark not right before a fenced block")
            pending = None
        i += 1
    if pending:
        problems.append(f"{_rel(page)}:{pending[0]}: a docs-run mark not followed by a fenced block")
    return blocks, problems


def _command_lines(block: Block) -> list[tuple[int, str]]:
    """The block's command lines: continuations joined, comments-only lines dropped, `$ ` removed."""
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for lineno, text in block.lines:
        if pending:
            lineno, text = pending[0], pending[1] + " " + text.strip()
            pending = None
        stripped = text.strip()
        if stripped.endswith("\\"):
            pending = (lineno, stripped[:-1].rstrip())
            continue
        if block.lang == "console":
            if stripped.startswith("$ "):
                out.append((lineno, stripped[2:]))
        elif stripped and not stripped.startswith("#"):
            out.append((lineno, stripped.removeprefix("$ ")))
    if pending:
        out.append(pending)
    return out


def page_steps(page: Path) -> tuple[list[Step], list[str]]:
    """Everything a page runs or skips, in order, and what is wrong with its marks."""
    blocks, problems = parse_page(page)
    steps: list[Step] = []
    for block in blocks:
        where = f"{block.page}:{block.lineno}"
        if block.lang not in SHELL_LANGS:
            continue
        if not block.is_commands:
            mark = block.mark
            if bool(mark.get("output-of")) == bool(mark.get("illustration")):
                problems.append(f"{where}: an output block needs exactly one of output-of / illustration")
            if set(mark) - OUTPUT_KEYS:
                problems.append(f"{where}: unknown keys {sorted(set(mark) - OUTPUT_KEYS)} (allowed: {OUTPUT_KEYS})")
            problems += _spec_problems(where, mark)
            if mark.get("output-of"):
                expect = [t for _, t in block.lines if t.strip()]
                steps.append(Step(block.page, block.lineno, mark["output-of"], mark, expect))
            continue
        commands = _command_lines(block)
        block_spec = {k: v for k, v in block.mark.items() if k in ("skip", "needs")}
        problems += _spec_problems(where, block_spec)
        specs: dict[int, dict] = {}
        for key, spec in block.mark.items():
            if key in ("skip", "needs"):
                continue
            hits = [n for n, text in commands if str(key) in text]
            if len(hits) != 1:
                problems.append(f"{where}: mark key {key!r} matches {len(hits)} command lines of the block, not 1")
                continue
            if not isinstance(spec, dict) or set(spec) - LINE_KEYS:
                problems.append(f"{where}: mark {key!r}: a mapping of {sorted(LINE_KEYS)} expected, got {spec!r}")
                continue
            problems += _spec_problems(f"{where} {key!r}", spec)
            specs[hits[0]] = spec
        for lineno, text in commands:
            spec = {**block_spec, **specs.get(lineno, {})}
            step = Step(block.page, lineno, text, spec)
            if not text.startswith("trtverify ") and not spec.get("skip"):
                problems.append(f"{step.where}: {text!r} is not a trtverify line: it needs a skip with a reason")
            steps.append(step)
    return steps, problems


def _spec_problems(where: str, spec: dict) -> list[str]:
    problems = []
    if "skip" in spec and not (isinstance(spec["skip"], str) and spec["skip"].strip()):
        problems.append(f"{where}: skip needs a reason")
    if spec.get("exit", 0) != 0 and not spec.get("why"):
        problems.append(f"{where}: exit {spec['exit']} needs a why")
    if "exit" in spec and not isinstance(spec["exit"], int):
        problems.append(f"{where}: exit must be an integer")
    if "needs" in spec and spec["needs"] not in NEEDS:
        problems.append(f"{where}: needs: one of {sorted(NEEDS)}")
    return problems


@cache
def _map() -> dict:
    return yaml.safe_load(MAP.read_text(encoding="utf-8"))


@cache
def _torch_missing() -> str | None:
    # found, not imported: collecting this module must not import torch into the test process
    return None if importlib.util.find_spec("torch") else "needs torch, which is not installed here"


def _skip_reason(step: Step) -> str | None:
    if step.spec.get("skip"):
        return step.spec["skip"]
    if step.spec.get("needs") == "torch":
        return _torch_missing()
    return None


# ---- turning a doc line into a command -------------------------------------------------------------------


def _words(line: str) -> list[str]:
    """Split on whitespace outside quotes, keeping the quotes; a `#` word outside quotes starts a comment."""
    words, word, quote = [], "", None
    for ch in line:
        if quote:
            word += ch
            if ch == quote:
                quote = None
        elif ch in "'\"":
            word += ch
            quote = ch
        elif ch.isspace():
            if word:
                words.append(word)
            word = ""
        elif ch == "#" and not word:
            break
        else:
            word += ch
    if word:
        words.append(word)
    return words


def _first_alternative(text: str) -> str:
    """fp16|int8 -> fp16 (a pipe stands alone: `a | b`, and `||` is left alone)."""
    if "|" in text and "||" not in text and not text.startswith("|") and not text.endswith("|"):
        return text.split("|", 1)[0]
    return text


def _unquoted(word: str, change) -> str:
    """`change` applied to the parts of a word outside quotes."""
    parts = re.split(r"""('[^']*'|"[^"]*")""", word)
    return "".join(part if part[:1] in ("'", '"') else change(part) for part in parts)


def to_command(text: str, tokens: dict[str, str]) -> str:
    """The doc line as a shell command: comment dropped, synopsis resolved, placeholders replaced."""
    out = []
    for word in _words(text):
        word = _unquoted(word, lambda s: _first_alternative(s.replace("[", "").replace("]", "").replace("...", "")))
        if word:
            out.append(word)
    command = " ".join(out)
    if tokens:
        pattern = re.compile(
            r"(?<![\w.-])(" + "|".join(re.escape(t) for t in sorted(tokens, key=len, reverse=True)) + r")(?![\w-])"
        )
        command = pattern.sub(lambda m: str(tokens[m.group(1)]), command)
    return command


def _normalise(text: str) -> str:
    return " ".join(text.split())


def missing_lines(expect: list[str], output: str) -> list[str]:
    """The lines of an example output that no line of the real output holds (`...`: any text)."""
    have = [_normalise(line) for line in output.splitlines()]
    missing = []
    for line in expect:
        pattern = re.compile(".*".join(re.escape(_normalise(part)) for part in line.split("...") if part.strip()))
        if not any(pattern.search(got) for got in have):
            missing.append(line.strip())
    return missing


# ---- the workspace ----------------------------------------------------------------------------------------


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = BIN + os.pathsep + env.get("PATH", "")
    env["REPO"] = str(ROOT)
    return env


def _sh(command: str, cwd: Path) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            ["bash", "-c", command], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(command, -1, "", f"timed out after {TIMEOUT_S} s")


def _page_config(page: str) -> dict:
    config = _map()
    own = (config.get("pages") or {}).get(page) or {}
    return {
        "files": {**(config.get("files") or {}), **(own.get("files") or {})},
        "tokens": {**(config.get("tokens") or {}), **(own.get("tokens") or {})},
        "setup": own.get("setup") or [],
    }


def make_workspace(page: str, folder: Path) -> dict:
    config = _page_config(page)
    folder.mkdir(parents=True, exist_ok=True)
    for name, source in config["files"].items():
        src, dst = ROOT / source, folder / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            shutil.copyfile(src, dst)
    for command in config["setup"]:
        p = _sh(command, folder)
        assert p.returncode == 0, f"{page}: setup {command!r} exited {p.returncode}:\n{_tail(p)}"
    return config


def _tail(p: subprocess.CompletedProcess, chars: int = 3000) -> str:
    return ((p.stdout or "") + (p.stderr or ""))[-chars:]


# ---- the tests --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_marks_are_well_formed(page: Path):
    """Every output block is produced or an illustration; every mark names one line; other tools are skipped."""
    _, problems = page_steps(page)
    assert not problems, "\n".join(problems)


def test_the_map_names_pages_and_files_that_exist():
    config = _map()
    pages = {_rel(p) for p in PAGES}
    assert set(config.get("pages") or {}) <= pages, sorted(set(config["pages"]) - pages)
    for page in [None, *(config.get("pages") or {})]:
        files = _page_config(page)["files"] if page else config.get("files") or {}
        for name, source in files.items():
            assert (ROOT / source).exists(), f"map.yaml: {page or 'files'}: {name} -> {source}: no such file"
        for command in _page_config(page)["setup"] if page else []:
            assert isinstance(command, str), f"map.yaml: {page}: setup: {command!r} is not a command line"


SKIPPED = [(step, _skip_reason(step)) for page in PAGES for step in page_steps(page)[0] if _skip_reason(step)]


@pytest.mark.parametrize("step, reason", SKIPPED, ids=[step.where for step, _ in SKIPPED])
def test_skipped_doc_lines(step: Step, reason: str):
    """Lines that need a GPU, a network, another tool or a missing torch: listed in the summary with why."""
    pytest.skip(f"{step.where}: {' '.join(_words(step.text))!r}: {reason}")


def _runnable(page: Path) -> bool:
    return any(not _skip_reason(s) for s in page_steps(page)[0])


# the pages are run in three rooms of their own (tests/docs/run_*/), each under a minute on two cores
COMMAND_PAGES = {"README.md", "docs/cli.md", "docs/reduce.md", "docs/ci.md", "docs/results.md", "docs/report.md"}


def group_of(page: Path) -> str:
    """Which room runs the page's lines: `stages` (docs/stages/), `commands` (COMMAND_PAGES) or `guides` (the rest)."""
    rel = _rel(page)
    return "stages" if rel.startswith("docs/stages/") else "commands" if rel in COMMAND_PAGES else "guides"


def runnable_pages(group: str) -> list[Path]:
    return [p for p in PAGES if _runnable(p) and group_of(p) == group]


def test_every_runnable_page_is_run_by_one_room():
    rooms = {d.name.removeprefix("run_") for d in (ROOT / "tests" / "docs").glob("run_*") if d.is_dir()}
    assert {group_of(p) for p in PAGES if _runnable(p)} <= rooms == {"stages", "commands", "guides"}


def run_page(page: Path, tmp_path: Path) -> None:
    """Run every command line of `page` in page order in a fresh workspace; each exits as documented."""
    steps, problems = page_steps(page)
    assert not problems, "\n".join(problems)
    folder = tmp_path / "ws"
    config = make_workspace(_rel(page), folder)
    failures = []
    for step in steps:
        if _skip_reason(step):
            continue
        command = to_command(step.text, config["tokens"])
        p = _sh(command, folder)
        expected = step.spec.get("exit", 0)
        why = f" ({step.spec['why']})" if step.spec.get("why") else ""
        if p.returncode != expected:
            failures.append(
                f"{step.where}: {step.text!r}\n  ran: {command}\n  exit {p.returncode}, expected {expected}{why}\n"
                + _indent(_tail(p))
            )
            continue
        missing = missing_lines(step.expect or [], (p.stdout or "") + "\n" + (p.stderr or ""))
        if missing:
            failures.append(
                f"{step.where}: output of {command!r} lacks these lines of the example:\n"
                + _indent("\n".join(missing))
                + "\n  its output:\n"
                + _indent(_tail(p))
            )
    assert not failures, "\n\n".join(failures)


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


CPU_INDEX = "https://download.pytorch.org/whl/cpu"
_TORCH_INSTALL = re.compile(r"\bpip install\b.*(?:\[[\w,]*\btorch\b[\w,]*\]|\s['\"]?torch\b(?![\w-]))")
NEAR = 3  # lines either side of a torch install within which its page must name PyTorch's CPU index


def torch_installs_without_cpu_index(text: str) -> list[int]:
    """Line numbers of `pip install` lines that install torch (`torch`, `torch==V`, an extra such as `.[torch]`)
    with PyTorch's CPU index neither on the line nor within NEAR lines of it: on Linux x86_64 PyPI's torch is
    the CUDA build (several GB), so every install line the docs show says how to get the CPU one (issue 36)."""
    lines = text.splitlines()
    return [
        i + 1
        for i, line in enumerate(lines)
        if _TORCH_INSTALL.search(line) and not any(CPU_INDEX in near for near in lines[max(0, i - NEAR) : i + NEAR + 1])
    ]


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_torch_installs_name_the_cpu_build(page: Path):
    bare = torch_installs_without_cpu_index(page.read_text(encoding="utf-8"))
    assert not bare, f"{_rel(page)}: lines {bare} install torch without PyTorch's CPU index ({CPU_INDEX}) next to them"


def test_the_readme_installs_the_cpu_torch_before_the_extra():
    """The README's install block: the CPU index line, then `.[torch]`, which then keeps that torch."""
    install = next(b for b in parse_page(ROOT / "README.md")[0] if any("pip install -e" in t for _, t in b.lines))
    lines = [" ".join(_words(text)) for _, text in _command_lines(install)]  # comments dropped
    cpu = next(i for i, text in enumerate(lines) if text.startswith("pip install torch ") and CPU_INDEX in text)
    extra = next(i for i, text in enumerate(lines) if '".[torch]"' in text)
    assert cpu < extra, lines
    assert install.mark.get("skip"), "install lines need a skip with the reason"


def test_torch_installs_are_found():
    cases = {
        'pip install -e ".[torch]"': [1],
        'pip install "trtverify[torch,dev]"': [1],
        "pip install torch==2.13.0 onnx": [1],
        "pip install torch": [1],
        "pip install torchvision-extra": [],
        'pip install -e ".[trt]"': [],
        f"pip install torch --index-url {CPU_INDEX}": [],
        f'pip install torch --index-url {CPU_INDEX}\npip install -e ".[torch]"': [],
        f'pip install torch --index-url {CPU_INDEX}\n\n\n\n\npip install -e ".[torch]"': [6],
    }
    for text, want in cases.items():
        assert torch_installs_without_cpu_index(text) == want, text


def test_synopsis_lines_become_commands():
    tokens = {"NAME": "perf", "N": "2", "I": "1", "DIR": "out"}
    assert (
        to_command("trtverify run SUITE.yaml [--stage NAME ...] [--out DIR] [-q]   # a comment", tokens)
        == "trtverify run SUITE.yaml --stage perf --out out -q"
    )
    assert to_command("trtverify merge shards/1 ... shards/N --shard I/N", tokens) == (
        "trtverify merge shards/1 shards/2 --shard 1/2"
    )
    assert to_command("trtverify repair R --precision fp16|int8 [--check 'a<=1 # x' ...]", {}) == (
        "trtverify repair R --precision fp16 --check 'a<=1 # x'"
    )
    assert to_command("trtverify engine audit EXPORTS... [--json]", {}) == "trtverify engine audit EXPORTS --json"
    assert missing_lines(["  FAIL a: 2 (limit <= 0): b ...", "x  y"], "  FAIL a: 2 (limit <= 0): b c\nx y z") == []
    assert missing_lines(["FAIL a ... z"], "FAIL a\nz") == ["FAIL a ... z"]


BAD_PAGE = """\
<!-- docs-run
"no such line": {exit: 1, why: x}
"trtverify run": {exit: 1}
-->
```sh
trtverify run a.yaml
trtverify run b.yaml --junit j.xml
make demo
```

```
          FAIL something
```

<!-- docs-run
output-of: trtverify run a.yaml
illustration: both
-->
```
out
```

<!-- docs-run
skip: ""
-->
```
python -m x \\
    --y
```
"""


def test_mark_problems_are_found(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text(BAD_PAGE)
    steps, problems = page_steps(page)
    text = "\n".join(problems)
    assert "mark key 'no such line' matches 0 command lines" in text
    assert "mark key 'trtverify run' matches 2 command lines" in text
    assert "'make demo' is not a trtverify line: it needs a skip with a reason" in text
    assert text.count("an output block needs exactly one of output-of / illustration") == 2
    assert "skip needs a reason" in text
    assert [s.text for s in steps][-1] == "python -m x --y"  # a continued line is one command
