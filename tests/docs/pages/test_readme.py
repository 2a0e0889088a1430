"""The README is a front door that matches the code: short, its links resolve, its suite examples
load, its command lines name commands and options that exist. The manual in docs/ too."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import ROOT
from trtverify.cli.main import cli
from trtverify.config.loader import load_suite

README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").rglob("*.md"))
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
BLOCK = re.compile(r"```(\w*)\n(.*?)```", re.S)


def test_the_readme_is_a_front_door():
    assert len(README.read_text().splitlines()) <= 200


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path):
    for target in LINK.findall(page.read_text()):
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            continue
        assert (page.parent / target).exists(), f"{page.name}: broken link {target}"


def _suite_blocks(text: str) -> list[str]:
    return [body for lang, body in BLOCK.findall(text) if lang == "yaml" and re.search(r"^models:", body, re.M)]


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: str(p.relative_to(ROOT)))
def test_suite_examples_load(page: Path, tmp_path: Path):
    """Every complete suite example in the docs is valid (paths are placeholders, so files are not checked)."""
    for i, body in enumerate(_suite_blocks(page.read_text())):
        path = tmp_path / f"example{i}.yaml"
        path.write_text(body)
        load_suite(path, check_files=False)


def _command_lines(text: str) -> list[str]:
    lines = []
    for lang, body in BLOCK.findall(text):
        if lang in ("sh", "bash", "console", ""):
            lines += [ln.split("#")[0].strip() for ln in body.splitlines() if ln.strip().startswith("trtverify ")]
    return lines


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: str(p.relative_to(ROOT)))
def test_command_lines_name_real_commands_and_options(page: Path):
    for line in _command_lines(page.read_text()):
        args = shlex.split(line.replace("...", ""))[1:]
        if not args or args[0].startswith("-"):
            continue
        assert args[0] in cli.commands, f"{page.name}: unknown command in {line!r}"
        command = cli.commands[args[0]]
        if hasattr(command, "commands") and len(args) > 1:  # a group: `trtverify engine audit ...`
            assert args[1] in command.commands, f"{page.name}: unknown subcommand in {line!r}"
            command = command.commands[args[1]]
        known = {o for p in command.params for o in p.opts} | {"-h", "--help"}
        used = {a.split("=")[0] for a in args[1:] if a.startswith("-") and not re.match(r"^-\d", a)}
        assert used <= known, f"{page.name}: {line!r} uses {sorted(used - known)}"
