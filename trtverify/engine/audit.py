"""`trtverify engine audit` and `engine diff`: what TensorRT built, where the time goes, what a rebuild changed."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import Field

from trtverify.engine.exports import (
    TIMES_NAMES,
    EngineLayer,
    IOTensor,
    io_format,
    load_json,
    peek_json,
    read_engine,
)
from trtverify.engine.plugins import PluginLayer, plugin_layers
from trtverify.engine.tables import console_layers
from trtverify.toolout.perfsummary import PerfSummary, parse_perf_summary
from trtverify.toolout.tables import (
    LayerListing,
    ProfileTable,
    TimesSummary,
    is_times,
    parse_layer_listing,
    parse_profile_table,
    summarize_times,
)
from trtverify.util.errors import UsageError
from trtverify.util.record import Record
from trtverify.util.words import count, plural

TOP = 5
MAX_LOG = 64 << 20
REFORMAT_SHARE = 0.05  # reformat layers above this share of the time are a finding
QDQ_NAME = re.compile(r"^(Quantize|Dequantize)Linear_\w+$")
ALIGN = {"INT8": 32, "FP16": 8, "BF16": 8, "FP8": 16}  # channel multiples tensor-core kernels want


class EngineRow(Record):
    name: str
    type: str
    precision: str | None
    avg_ms: float | None
    share: float | None = Field(description="of the sum of per-layer average ms")
    onnx_nodes: list[str]
    reformat: bool = Field(default=False, description="a reformat layer (LayerType Reformat)")


class EngineFinding(Record):
    kind: str
    severity: str
    layers: list[str]
    message: str


class Audit(Record):
    """One engine (`--json`: these keys are stable; schema: `trtverify schema --engine`)."""

    layers: int = Field(description="engine layers")
    reformat_layers: int
    total_ms: float | None = Field(description="sum of per-layer average ms (null without a profile)")
    precisions: dict[str, int] = Field(description="engine layers per precision")
    rows: list[EngineRow]
    findings: list[EngineFinding]
    performance: PerfSummary | None = Field(default=None, description="trtexec's performance summary (a log given)")
    inspector: str | None = Field(
        default=None,
        description="the IEngineInspector generation that wrote the layer file: 'TensorRT 11' (I/O Tensors, split "
        "Format and Datatype) or 'TensorRT <= 10' (Bindings, Format/Datatype); null: neither list in the file",
    )
    io_tensors: list[IOTensor] = Field(default_factory=list, description="the engine's inputs and outputs")
    plugins: list[PluginLayer] = Field(
        default_factory=list,
        description="the plugin layers, each with its time, its share and the reformat/copy layers next to it",
    )
    files: dict[str, Any] = Field(description="what was read")


def _rows(layers: list[EngineLayer]) -> tuple[list[EngineRow], float | None]:
    timed = [layer.avg_ms for layer in layers if layer.avg_ms is not None]
    total = sum(timed) if timed else None
    rows = [
        EngineRow(
            name=layer.name,
            type=layer.type,
            precision=layer.precision,
            avg_ms=layer.avg_ms,
            share=(layer.avg_ms / total) if total and layer.avg_ms is not None else None,
            onnx_nodes=layer.onnx_nodes,
            reformat=layer.reformat,
        )
        for layer in layers
    ]
    return rows, total


def _first_io(raw: dict[str, Any], key: str) -> dict[str, Any]:
    """The first input or output record of a layer ({} where the export holds something else there)."""
    items = raw.get(key)
    return items[0] if isinstance(items, list) and items and isinstance(items[0], dict) else {}


def _channels(layer: EngineLayer) -> tuple[int | None, int | None]:
    raw = layer.raw
    out = raw.get("OutMaps")
    dims = _first_io(raw, "Inputs").get("Dimensions") or []
    cin = dims[1] if isinstance(dims, list) and len(dims) > 1 else None
    as_int = lambda v: int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None  # noqa: E731
    return as_int(cin), as_int(out)


def findings(
    layers: list[EngineLayer], total: float | None, plugins: list[PluginLayer] | None = None
) -> list[EngineFinding]:
    out = []
    reformats = [layer for layer in layers if layer.reformat]
    if reformats and total:
        ms = sum(layer.avg_ms or 0.0 for layer in reformats)
        share = ms / total
        out.append(
            EngineFinding(
                kind="reformat_time",
                severity="medium" if share > REFORMAT_SHARE else "info",
                layers=[layer.name for layer in reformats],
                message=f"{len(reformats)} reformat layers take {ms:.3f} ms, {share:.1%} of the engine's time",
            )
        )
    unfused = [layer for layer in layers[1:] if layer.reformat and any(QDQ_NAME.match(n) for n in layer.onnx_nodes)]
    if unfused:
        out.append(
            EngineFinding(
                kind="qdq_unfused",
                severity="medium",
                layers=[layer.name for layer in unfused],
                message=f"{len(unfused)} Q/DQ nodes run as separate reformat layers: the layer before each writes "
                "FP16/FP32 (typically a residual Add without Q/DQ on its inputs), so TensorRT requantizes its output",
            )
        )
    hp = [layer for layer in layers if layer.raw.get("Weights") and layer.precision in ("INT8", "FP8")]
    mixed_out = [
        layer.name
        for layer in hp
        if any("Add" in n for n in layer.onnx_nodes)
        and io_format(_first_io(layer.raw, "Outputs")).lower().find("int8") < 0
    ]
    if mixed_out:
        out.append(
            EngineFinding(
                kind="residual_add_high_precision",
                severity="medium",
                layers=mixed_out,
                message=f"{len(mixed_out)} INT8 convolutions with a fused residual Add write FP16/FP32: the Add has no "
                "Q/DQ, so its output cannot stay INT8",
            )
        )
    wanted = "INT8" if any(layer.precision == "INT8" for layer in layers) else None
    below = [
        layer.name
        for layer in layers
        if wanted and layer.raw.get("Weights") and layer.precision not in ("INT8", "FP8", None)
    ]
    if below:
        out.append(
            EngineFinding(
                kind="below_requested_precision",
                severity="medium",
                layers=below,
                message=f"{count(len(below), 'layer')} with weights {plural('runs|run', len(below))} in higher "
                "precision than INT8 in an INT8 engine",
            )
        )
    misaligned: list[tuple[str, str]] = []
    for layer in layers:
        need = ALIGN.get(layer.precision or "")
        if need and "Convolution" in layer.type:
            cin, cout = _channels(layer)
            if (cin and cin % need) or (cout and cout % need):
                misaligned.append(
                    (layer.name, f"{layer.name} ({cin}->{cout}, {layer.precision} wants multiples of {need})")
                )
    if misaligned:
        out.append(
            EngineFinding(
                kind="channels_misaligned",
                severity="info",
                layers=[name for name, _ in misaligned],
                message="channel counts that defeat tensor-core kernels: " + "; ".join(m for _, m in misaligned[:5]),
            )
        )
    regions = [layer.name for layer in layers if layer.name.startswith("{ForeignNode[") or "Myelin" in layer.type]
    if regions:
        out.append(EngineFinding(kind="myelin_regions", severity="info", layers=regions,
                                 message=f"{len(regions)} Myelin (ForeignNode) regions"))  # fmt: skip
    if plugins:
        out.append(plugin_finding(plugins, total))
    if total:
        top = sorted((layer for layer in layers if layer.avg_ms), key=lambda x: -(x.avg_ms or 0))[:TOP]
        listing = ", ".join(f"{layer.name} {layer.avg_ms:.3f} ms" for layer in top)
        out.append(EngineFinding(kind="top_layers", severity="info", layers=[layer.name for layer in top],
                                 message=f"the {len(top)} slowest layers: {listing}"))  # fmt: skip
    return out


def plugin_finding(plugins: list[PluginLayer], total: float | None) -> EngineFinding:
    """What the plugin layers and the reformat/copy layers next to them cost (medium: those copies take more than
    REFORMAT_SHARE of the engine's time)."""
    near = list(dict.fromkeys(n.name for p in plugins for n in p.next_to))
    ms = {n.name: n.avg_ms for p in plugins for n in p.next_to}
    names = ", ".join(p.name for p in plugins[:3]) + (", ..." if len(plugins) > 3 else "")
    what = f"{count(len(plugins), 'plugin layer')} ({names})"
    them = plural("it|them", len(plugins))
    copies = count(len(near), "reformat/copy layer")
    tail = "; TensorRT fuses nothing across a plugin"
    timed = [p.avg_ms for p in plugins if p.avg_ms is not None]
    if not total or not timed:
        message = f"{what}, {copies} next to {them}; no profile, so no times{tail}"
        return EngineFinding(kind="plugins", severity="info", layers=[p.name for p in plugins] + near,
                             message=message)  # fmt: skip
    own = sum(timed)
    copy_ms = sum(v or 0.0 for v in ms.values())
    beside = f"the {copies} next to {them} {copy_ms:.3f} ms ({copy_ms / total:.1%})"
    beside = beside if near else f"no reformat/copy layer next to {them}"
    message = f"{what} {plural('takes|take', len(plugins))} {own:.3f} ms, {own / total:.1%} of the engine's time; "
    message += beside + tail
    severity = "medium" if copy_ms / total > REFORMAT_SHARE else "info"
    return EngineFinding(kind="plugins", severity=severity, layers=[p.name for p in plugins] + near, message=message)


def _read_log(log: Path) -> str:
    if log.stat().st_size > MAX_LOG:
        raise UsageError(f"{log}: {log.stat().st_size >> 20} MB, larger than a trtexec log should be")
    text = log.read_text(encoding="utf-8", errors="replace")
    if "\0" in text:
        raise UsageError(f"{log}: holds NUL bytes: a binary file, not a trtexec console log")
    return text


def _console(paths: list[Path]) -> tuple[PerfSummary | None, ProfileTable | None, LayerListing | None, list[str]]:
    """What the console logs among `paths` hold (the last of each kind wins): the performance summary, the
    `--dumpProfile` table, the `--dumpLayerInfo` (or verbose build) layer listing."""
    logs = [p for p in paths if p.is_file() and p.suffix.lower() != ".json"]
    logs += [f for p in paths if p.is_dir() for f in sorted(p.glob("*.log")) + sorted(p.glob("*.txt"))]
    perf, table, listing = None, None, None
    for log in logs:
        text = _read_log(log)
        perf = parse_perf_summary(text) or perf
        table = parse_profile_table(text) or table
        listing = parse_layer_listing(text) or listing
    return perf, table, listing, [str(x) for x in logs]


def _times(paths: list[Path]) -> tuple[TimesSummary | None, str | None]:
    """The `--exportTimes` file among `paths` (named *.timing.json / *times.json, or told by content), summarised."""
    files = [p for p in paths if p.is_file() and p.suffix.lower() == ".json"]
    files += [f for p in paths if p.is_dir() for f in sorted(p.glob("*.json"))]
    named = [f for f in files if f.name.endswith(TIMES_NAMES)]
    # told by content only among files not named as another export (read_engine parses those itself)
    other = ("graph.json", "layer.json", "layers.json", "layerinfo.json", "profile.json", "metadata.json")
    unnamed = [f for f in files if not f.name.endswith(other) and f.stat().st_size > 0]
    for f in named or unnamed:
        data = load_json(f) if named else peek_json(f)
        if named or is_times(data):
            return summarize_times(data, str(f)), str(f)
    return None, None


def engine_layers(paths: list[Path]) -> tuple[list[EngineLayer], dict[str, Any], PerfSummary | None]:
    """One engine's layers, what was read and its performance summary, from its trtexec exports and/or console
    log(s): JSON exports give the layers when there are some, else the log's `--dumpLayerInfo` listing and
    `--dumpProfile` table do; the performance summary comes from the log, else from an `--exportTimes` file."""
    performance, table, listing, logs = _console(paths)
    times, times_file = _times(paths)
    if performance is None and times is not None:
        performance = PerfSummary(stats=times.stats, format="export_times", inferences=times.inferences)
    from_console = table is not None or listing is not None
    layers, files = read_engine(paths, allow_none=performance is not None or from_console)
    if not layers and from_console:
        layers = console_layers(listing, table)
        files["console"] = {
            "profile_format": table.format if table else None,
            "profile_iterations": table.iterations if table else None,
            "profile_total_avg_ms": table.total.avg_ms if table and table.total else None,
            "layer_listing": listing.format if listing else None,
        }
    if logs:
        files["logs"] = logs
    if times_file:
        files["times"] = times_file
    return layers, files, performance


def audit(paths: list[Path], plugins: Sequence[str] = ()) -> Audit:
    """Audit one engine from its trtexec exports and/or console log(s) (see `engine_layers`); `plugins`: `--plugin`
    patterns naming plugin layers an export lists by name only (trtverify.engine.plugins)."""
    return audit_layers(*engine_layers(paths), plugins=plugins)


def audit_layers(
    layers: list[EngineLayer],
    files: dict[str, Any],
    performance: PerfSummary | None = None,
    plugins: Sequence[str] = (),
) -> Audit:
    """The audit of layers already read (engine diff audits both builds from what it read)."""
    rows, total = _rows(layers)
    found = plugin_layers(layers, total, plugins)
    precisions = Counter(layer.precision or "unknown" for layer in layers)
    files = dict(files)
    io: list[IOTensor] = files.pop("io_tensors", None) or []
    return Audit(
        inspector=files.pop("inspector", None),
        io_tensors=io,
        layers=len(layers),
        reformat_layers=sum(1 for layer in layers if layer.reformat),
        total_ms=total,
        precisions=dict(sorted(precisions.items())),
        rows=rows,
        findings=findings(layers, total, found),
        performance=performance,
        plugins=found,
        files=files,
    )
