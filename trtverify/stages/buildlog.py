"""Audit `buildlog`: read TensorRT build logs, report findings with line numbers, gate on them.

Logs come from `stages.buildlog.logs`, or from the `build_log` files the tensorrt backends
write while building. Layer names in findings are the engine's layer names, which for
TensorRT's ONNX parser carry the ONNX node names the layerwise stage reports.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trtverify.buildlog import parse_file
from trtverify.buildlog.catalog import selects
from trtverify.compare.checks import CheckResult
from trtverify.stages.base import StageContext, StageResult

NAME = "buildlog"


def _logs(ctx: StageContext) -> list[Path]:
    cfg = ctx.loaded.suite.stages.buildlog
    assert cfg is not None
    if cfg.logs:
        return [Path(p) for p in cfg.logs]
    backends = ctx.loaded.suite.backends
    captured = [getattr(backends, n).build_log for n in ("tensorrt", "tensorrt_rtx")]
    return [Path(p) for p in captured if p is not None and Path(p).exists()]


def run(ctx: StageContext) -> StageResult:
    cfg = ctx.loaded.suite.stages.buildlog
    assert cfg is not None
    logs = _logs(ctx)
    result = StageResult(NAME, "failed")
    checks = [
        CheckResult(
            "build logs read",
            "logs",
            float(len(logs)),
            1.0,
            ">=",
            bool(logs),
            None,
            {}
            if logs
            else {
                "reason": "no log given and no backend wrote one (set stages.buildlog.logs or backends.tensorrt.build_log)"
            },
        )
    ]
    entries: list[dict[str, Any]] = []
    for i, path in enumerate(logs):
        parsed = parse_file(path)
        label = path.name
        entry = {"log": str(path), **parsed.to_dict()}
        if cfg.against is not None:
            from trtverify.buildlog.diff import diff

            entry["against"] = {"log": str(cfg.against), **diff(parsed, parse_file(Path(cfg.against)))}
        entries.append(entry)
        for name in cfg.fail_on:
            hits = [f for f in parsed.findings if selects(name, f.kind, f.category) and f.severity in cfg.fail_severity]
            n = sum(f.count for f in hits)
            checks.append(
                CheckResult(
                    f"{label}: no {name} findings ({'/'.join(cfg.fail_severity)})",
                    f"{name}_findings",
                    float(n),
                    0.0,
                    "<=",
                    n == 0,
                    None,
                    {
                        "findings": [
                            {
                                "kind": f.kind,
                                "lines": list(f.lines)[:10],
                                "layers": list(f.layers)[:10],
                                "count": f.count,
                            }
                            for f in hits[:20]
                        ]
                    }
                    if hits
                    else {},
                )
            )
        for name, limit in cfg.max.items():
            hits = [f for f in parsed.findings if selects(name, f.kind, f.category)]
            n = sum(f.count for f in hits)
            checks.append(
                CheckResult(
                    f"{label}: {name} count <= {limit}",
                    f"{name}_count",
                    float(n),
                    float(limit),
                    "<=",
                    n <= limit,
                    None,
                    {"lines": sorted({ln for f in hits for ln in f.lines})[:20]} if hits else {},
                )
            )
        ctx.progress(NAME, i + 1, len(logs), "parse")
    result.details["logs"] = entries
    return StageResult.from_checks(NAME, checks, details=result.details, notes=result.notes, timings=result.timings)
