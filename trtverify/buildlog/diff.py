"""Two builds side by side: what a TensorRT upgrade (or any rebuild) silently changed."""

from __future__ import annotations

from typing import Any

from trtverify.buildlog import BuildLog


def _key(f: Any) -> tuple[str, tuple[str, ...]]:
    return f.kind, tuple(sorted(f.layers))


def diff(new: BuildLog, old: BuildLog) -> dict[str, Any]:
    """Layers whose precision, tactic, type or fused ONNX nodes (onnx_nodes) changed; layers only in one build;
    findings (kind + layers) that are new, and those that went away."""
    old_layers = {layer["name"]: layer for layer in old.layers if layer.get("name")}
    new_layers = {layer["name"]: layer for layer in new.layers if layer.get("name")}
    changed = []
    for name, n in new_layers.items():
        o = old_layers.get(name)
        if o is None:
            continue
        fields = {
            k: {"old": o.get(k), "new": n.get(k)}
            for k in ("precision", "tactic", "onnx_nodes", "type")
            if o.get(k) != n.get(k)
        }
        if fields:
            changed.append({"layer": name, "changes": fields})
    old_f = {_key(f) for f in old.findings}
    new_f = {_key(f) for f in new.findings}
    return {
        "versions": {"old": old.version, "new": new.version},
        "layers_changed": changed,
        "layers_only_new": sorted(set(new_layers) - set(old_layers)),
        "layers_only_old": sorted(set(old_layers) - set(new_layers)),
        "new_findings": [f.to_dict() for f in new.findings if _key(f) not in old_f],
        "gone_findings": [f.to_dict() for f in old.findings if _key(f) not in new_f],
    }
