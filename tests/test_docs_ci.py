"""docs/ci.md matches the code: its workflows are valid YAML and every trtverify command line
in them uses a subcommand and options that exist (the workflows themselves cannot run here)."""

from __future__ import annotations

import re
import shlex

import yaml

from tests.conftest import ROOT
from trtverify.cli.main import cli
from trtverify.stages.base import Shard

DOC = ROOT / "docs" / "ci.md"


def _commands(node: object) -> list[str]:
    if isinstance(node, str):
        return [line.strip() for line in node.splitlines() if line.strip().startswith("trtverify ")]
    if isinstance(node, list):
        return [c for item in node for c in _commands(item)]
    if isinstance(node, dict):
        return [c for v in node.values() for c in _commands(v)]
    return []


def test_every_workflow_is_yaml_and_its_commands_exist():
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) == 4  # GitHub and GitLab, single job and sharded
    commands = []
    for block in blocks:
        commands += _commands(yaml.safe_load(block))
    assert {c.split()[1] for c in commands} == {"run", "merge"}
    for command in commands:
        command = command.split(" || ")[0]
        command = (
            command.replace("${{ matrix.shard }}", "2")
            .replace("${CI_NODE_INDEX}", "2")
            .replace("${CI_NODE_TOTAL}", "4")
        )
        args = shlex.split(command)[1:]
        sub = cli.commands[args[0]]
        known = {o for p in sub.params for o in p.opts}
        used = [a for a in args[1:] if a.startswith("-")]
        assert used and set(used) <= known, (command, set(used) - known)
        if "--shard" in args:
            assert Shard.parse(args[args.index("--shard") + 1]).count == 4
        if args[0] == "run":
            assert "--out" in args
