"""Two builds side by side: what a TensorRT upgrade (or any rebuild) silently changed."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from trtverify.buildlog.findings import Finding
from trtverify.buildlog.parser import BuildLog
from trtverify.util.record import Record, optional

COMPARED = ("precision", "tactic", "onnx_nodes", "type")


class Change(Record):
    old: Any
    new: Any


class LayerChange(Record):
    layer: str
    changes: dict[str, Change]


class Versions(Record):
    old: str | None
    new: str | None


class BuildDiff(Record):
    """Layers whose precision, tactic, type or fused ONNX nodes changed; layers only in one build;
    findings (kind + layers) that are new, and those that went away."""

    versions: Versions
    layers_changed: list[LayerChange]
    layers_only_new: list[str]
    layers_only_old: list[str]
    new_findings: list[Finding]
    gone_findings: list[Finding]


def _key(f: Finding) -> tuple[str, tuple[str, ...]]:
    return f.kind, tuple(sorted(f.layers))


def diff(new: BuildLog, old: BuildLog) -> BuildDiff:
    old_layers = {layer.name: layer for layer in old.layers if layer.name}
    new_layers = {layer.name: layer for layer in new.layers if layer.name}
    changed = []
    for name, n in new_layers.items():
        o = old_layers.get(name)
        if o is None:
            continue
        fields = {k: Change(old=getattr(o, k), new=getattr(n, k)) for k in COMPARED if getattr(o, k) != getattr(n, k)}
        if fields:
            changed.append(LayerChange(layer=name, changes=fields))
    old_f = {_key(f) for f in old.findings}
    new_f = {_key(f) for f in new.findings}
    return BuildDiff(
        versions=Versions(old=old.version, new=new.version),
        layers_changed=changed,
        layers_only_new=sorted(set(new_layers) - set(old_layers)),
        layers_only_old=sorted(set(old_layers) - set(new_layers)),
        new_findings=[f for f in new.findings if _key(f) not in old_f],
        gone_findings=[f for f in old.findings if _key(f) not in new_f],
    )


class AgainstLog(BuildDiff):
    """What changed from an older build's log."""

    log: str = Field(description="the older log")


class ParseLogOutput(BuildLog):
    """`trtverify parse-log --json` (stable keys; schema: `trtverify schema --parse-log`)."""

    against: AgainstLog | None = optional("with --against OLD.log: what changed")
