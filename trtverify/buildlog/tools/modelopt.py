"""ModelOpt's ONNX console: post-training quantization (`python -m modelopt.onnx.quantization`) and AutoCast
(`python -m modelopt.onnx.autocast`), as ModelOpt 0.2x-0.4x logs them (`2026-11-27 01:54:47,277 - [modelopt][onnx] -
INFO - ...`; the messages are modelopt/onnx/quantization/quantize.py's, int8.py's, fp8.py's, graph_utils.py's and
autocast/convert.py's `logger.info` calls). One finding per run: the model, the mode, the calibration method and data,
the nodes quantized, kept or excluded, the partitions found (MHA, LayerNorm), what it wrote, how long it took.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from trtverify.buildlog.findings import Hit
from trtverify.buildlog.lines import LogRecord
from trtverify.buildlog.tools.common import first_line

_INT = int
_RULES: list[tuple[re.Pattern[str], str, Any]] = [
    (re.compile(r"^Starting quantization process for model: (?P<v>\S+)"), "model", str),
    (re.compile(r"^Loading ONNX model from (?P<v>\S+)"), "model", str),
    (re.compile(r"^Preprocessing the model (?P<v>\S+)"), "model", str),
    (re.compile(r"^Quantization mode: (?P<v>\w+)"), "mode", str),
    (re.compile(r"^Starting INT8 quantization with (?:method: |')(?P<v>\w+)"), "calibration_method", str),
    (re.compile(r"^Starting (?P<v>INT8|FP8|INT4) quantization"), "mode", str.lower),
    # ONNX Runtime's calibrator, which ModelOpt's INT8 path runs (onnxruntime/quantization/calibrate.py prints)
    (re.compile(r"^Finding optimal threshold for each tensor using '(?P<v>\w+)' algorithm"), "calibration_method", str),
    (re.compile(r"^Number of tensors : (?P<v>\d+)"), "calibrated_tensors", _INT),
    (re.compile(r"^Number of histogram bins : (?P<v>\d+)"), "histogram_bins", _INT),
    (re.compile(r"^Number of quantized bins : (?P<v>\d+)"), "quantized_bins", _INT),
    (re.compile(r"^Collecting tensor data and making histogram"), "histogram_passes", "count"),
    (re.compile(r"^\s*\d+%\|"), "progress", "skip"),
    (re.compile(r"^Using calibration cache from (?P<v>\S+)"), "calibration_cache", str),
    (re.compile(r"^Importing scales from calibration cache: (?P<v>\S+)"), "calibration_cache", str),
    (re.compile(r"^Processed (?P<v>\d+) batches of calibration data"), "calibration_batches", _INT),
    (re.compile(r"^Initializing RandomDataProvider"), "random_calibration_data", bool),
    (re.compile(r"^Total number of nodes: (?P<v>\d+)"), "nodes", _INT),
    (re.compile(r"^Total number of quantizable nodes: (?P<v>\d+)"), "quantizable_nodes", _INT),
    (re.compile(r"^Final number of nodes to quantize: (?P<v>\d+)"), "nodes_to_quantize", _INT),
    (re.compile(r"^Total number of quantized nodes: (?P<v>\d+)"), "quantized_nodes", _INT),
    (re.compile(r"^Quantizable op types: (?P<v>\[.*\])"), "quantizable_op_types", str),
    (re.compile(r"^Found (?P<v>\d+) MHA \(QK_AV\) Patterns"), "mha_partitions", _INT),
    (re.compile(r"^No MHA partitions found in the model"), "mha_partitions", lambda _: 0),
    (re.compile(r"^Disabling QDQ for all MHA nodes"), "mha_qdq_disabled", bool),
    (re.compile(r"^Found (?P<v>\d+) layer norm partitions"), "layernorm_partitions", _INT),
    (re.compile(r"^Found (?P<v>\d+) non-quantizable partitions"), "non_quantizable_partitions", _INT),
    (re.compile(r"^Found (?P<v>\d+) unsupported Conv nodes for quantization"), "unsupported_conv_nodes", _INT),
    (re.compile(r"^Model already has QDQ nodes, skipping quantization"), "already_quantized", bool),
    (re.compile(r"^No node or node type is selected for quantization"), "nothing_selected", bool),
    (re.compile(r"^Quantized onnx model is saved as (?P<v>\S+)"), "output", str),
    (re.compile(r"^No output path specified, save quantized model to (?P<v>\S+)"), "output", str),
    (re.compile(r"^Converted model saved to (?P<v>\S+)"), "output", str),
    (re.compile(r"^Quantization completed successfully in (?P<v>[\d.]+) seconds"), "seconds", float),
    (re.compile(r"^FP8 quantization completed in (?P<v>[\d.]+) seconds"), "seconds", float),
    (re.compile(r"^Converted (?P<v>\d+/\d+) nodes \((?P<pct>[\d.]+)%\) to (?P<to>\w+)"), "converted", str),
    (re.compile(r"^Skipping node (?P<v>\S+): (?P<why>\w+)"), "kept_high_precision", str),
    (re.compile(r"^Force-including node (?P<v>\S+): (?P<why>\w+)"), "force_included", str),
    (re.compile(r"^Matmul nodes (?:From MHA )?to exclude: (?P<v>.+)"), "excluded_matmuls", str),
]
_OTHER = re.compile(
    r"^(?:Starting |Model is cloned to |Duplicating shared|Setting up |Analyzing MHA|Detecting GEMV|Creating ORT|"
    r"Successfully (?:enabled|updated|converted)|Scanning for|Configuring ORT|Finding |Building |Searching for|"
    r"Classifying|Found \d+ |Deleting QDQ|Converting float|Cleaning up|Validating quantized|Quantization process "
    r"completed|Running ONNX Runtime|Converted FP64|Ensured custom|Propagating tensor|Aggregating statistics|"
    r"Removing \d+ redundant|Replaced LayerNorm|No custom ops found|Making TensorRT EP|Custom op detected|"
    r"Checking for|Running Auto Q/DQ|Logging configured|Converting model from opset|Quantizable op types|"
    r"Starting static)"
)


_HIST = "Collecting tensor data and making histogram"


def rule_modelopt(records: list[LogRecord]) -> Iterator[Hit]:
    d: dict[str, Any] = {}
    lines: list[int] = []
    autocast = False
    for r in records:
        if r.dialect not in ("modelopt", "unknown"):
            continue
        text = first_line(r)
        joined = r.text.count(_HIST) - text.startswith(_HIST)  # calibration passes joined to this record
        if d and joined > 0:
            d["histogram_passes"] = d.get("histogram_passes", 0) + joined
        for rx, key, cast in _RULES:
            m = rx.match(text)
            if not m:
                continue
            if r.dialect == "unknown" and not d and key not in ("model", "mode", "converted"):
                break  # a line of ModelOpt's (or its calibrator's) without its prefix counts inside a ModelOpt run
            v = cast(m["v"]) if "v" in m.groupdict() and callable(cast) else True
            if cast in ("count", "skip"):  # (a pass's line may be joined to the one before as a wrap: counted there)
                if cast == "count":
                    d[key] = d.get(key, 0) + 1
            elif key in ("kept_high_precision", "force_included"):
                d.setdefault(key, []).append(m["v"])
            elif key == "converted":
                autocast = True
                d.update(converted=m["v"], converted_pct=float(m["pct"]), mode=m["to"].lower())
            elif key in ("model", "calibration_method"):
                d.setdefault(key, v)
            else:
                d[key] = v
            lines.append(r.first)
            break
        else:
            if r.dialect == "modelopt" and _OTHER.match(text):
                lines.append(r.first)
    if not d:
        return
    if "histogram_passes" in d:  # ONNX Runtime's calibrator collects once per calibration batch
        d.setdefault("calibration_batches", d["histogram_passes"])
    tool = "AutoCast" if autocast else "ModelOpt quantization"
    parts = [" ".join(p for p in (d.get("mode", "").upper(), f"of {d['model']}" if "model" in d else "") if p)]
    parts += [f"calibration {d['calibration_method']}" if "calibration_method" in d else ""]
    parts += [f"{d['calibration_batches']} calibration batches" if "calibration_batches" in d else ""]
    parts += ["RANDOM calibration data" if d.get("random_calibration_data") else ""]
    if "quantized_nodes" in d:
        parts.append(f"{d['quantized_nodes']} of {d.get('nodes', '?')} nodes quantized")
    elif "nodes_to_quantize" in d:
        parts.append(f"{d['nodes_to_quantize']} nodes to quantize")
    parts += [f"{d['converted']} nodes converted" if "converted" in d else ""]
    parts += [f"{len(d['kept_high_precision'])} nodes kept in high precision" if "kept_high_precision" in d else ""]
    parts += [f"{d['mha_partitions']} MHA partitions" if "mha_partitions" in d else ""]
    parts += [f"wrote {d['output']}" if "output" in d else "no output written in the log"]
    sev = "high" if d.get("random_calibration_data") or d.get("nothing_selected") else "info"
    msg = f"{tool}: " + ", ".join(p for p in parts if p)
    layers = tuple(d.get("kept_high_precision", []))
    yield Hit("modelopt_quantization", "calibration", sev, msg, lines[0], layers, d, read=tuple(lines))


RULES = (rule_modelopt,)
KINDS = {"modelopt_quantization": ("calibration", "modelopt")}  # info (high with random data or nothing selected)
