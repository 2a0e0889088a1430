"""Audit `buildlog`: read TensorRT build logs, report findings with line numbers, gate on them.

Logs come from `stages.buildlog.logs`, or from the `build_log` files the tensorrt backends
write while building. Layer names in findings are the engine's layer names, which for
TensorRT's ONNX parser carry the ONNX node names the layerwise stage reports.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from trtverify.buildlog.diff import AgainstLog, diff
from trtverify.buildlog.parser import BuildLog, parse_file
from trtverify.compare.checks import CheckResult, limit_check
from trtverify.config.findings import selects
from trtverify.stages.base import StageContext, StageResult, status_of
from trtverify.util.record import optional

NAME = "buildlog"


class LogResult(BuildLog):
    """One audited log: what it says, and what changed against the older log."""

    log: str = Field(description="the log file")
    against: AgainstLog | None = optional()


class BuildlogResult(StageResult):
    """Stage buildlog: the findings of each TensorRT build log."""

    name: Literal["buildlog"] = "buildlog"
    logs: list[LogResult] | None = optional("one entry per log read")


def _logs(ctx: StageContext) -> list[Path]:
    cfg = ctx.loaded.suite.stages.buildlog
    assert cfg is not None
    if cfg.logs:
        return [Path(p) for p in cfg.logs]
    backends = ctx.loaded.suite.backends
    captured = [backends.tensorrt.build_log, backends.tensorrt_rtx.build_log]
    return [Path(p) for p in captured if p is not None and Path(p).exists()]


def run(ctx: StageContext) -> BuildlogResult:
    cfg = ctx.loaded.suite.stages.buildlog
    assert cfg is not None
    logs = _logs(ctx)
    why = {"reason": "no log given and no backend wrote one (set stages.buildlog.logs or backends.tensorrt.build_log)"}
    checks: list[CheckResult] = [
        limit_check("build logs read", NAME, "logs", len(logs), 1, ">=", detail={} if logs else why)
    ]
    older = parse_file(Path(cfg.against)) if cfg.against is not None else None
    entries: list[LogResult] = []
    for i, path in enumerate(logs):
        parsed = parse_file(path)
        label = path.name
        against = None
        if older is not None:
            against = AgainstLog(log=str(cfg.against), **dict(diff(parsed, older)))
        entries.append(LogResult(log=str(path), **dict(parsed), against=against))
        for name in cfg.fail_on:
            hits = [f for f in parsed.findings if selects(name, f.kind, f.category) and f.severity in cfg.fail_severity]
            n = sum(f.count for f in hits)
            listed = [
                {"kind": f.kind, "lines": list(f.lines)[:10], "layers": list(f.layers)[:10], "count": f.count}
                for f in hits[:20]
            ]
            checks.append(
                limit_check(
                    f"{label}: no {name} findings ({'/'.join(cfg.fail_severity)})",
                    NAME,
                    f"{name}_findings",
                    n,
                    0,
                    "<=",
                    detail={"findings": listed} if hits else {},
                )
            )
        for name, limit in cfg.max.items():
            hits = [f for f in parsed.findings if selects(name, f.kind, f.category)]
            n = sum(f.count for f in hits)
            lines = sorted({ln for f in hits for ln in f.lines})[:20]
            checks.append(
                limit_check(
                    f"{label}: {name} count <= {limit}",
                    NAME,
                    f"{name}_count",
                    n,
                    limit,
                    "<=",
                    detail={"lines": lines} if hits else {},
                )
            )
        ctx.progress(NAME, i + 1, len(logs), "parse")
    return BuildlogResult(status=status_of(checks), checks=checks, logs=entries)
