"""The issue's cases on the shapes detector exported as TensorRT users export it (demo/plugins): ending in
EfficientNMS_TRT (built-in reference), and with a user's plugin mid-graph. Every stage that runs ONNX models runs
around the plugins: layerwise compares every convolution and the NMS outputs, e2e reads the plugin's four outputs
(its mAP equal to pycocotools' on plainly decoded detections of the raw head:
tests/stages/detection/test_e2e_detection_layouts.py
checks that figure), framework compares PyTorch's detections with the export's."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from tests.conftest import ROOT, run_cli
from tests.stages.detection.test_e2e_detection_layouts import (
    NMS,
    RAW,
    plain_nms,
    pycocotools_map,
    raw_heads,
    val,
    write_suite,
)

PLUGINS = ROOT / "demo" / "plugins"
__all__ = ["raw_heads", "val"]  # fixtures, imported to be used here


def _stage(out: Path, name: str) -> dict:
    return next(s for s in json.loads((out / "results.json").read_text())["stages"] if s["name"] == name)


def test_layerwise_on_a_detector_ending_in_efficientnms_compares_every_conv_and_the_detections(tmp_path: Path):
    ref, cand = PLUGINS / "shapes_yolo_nms.onnx", PLUGINS / "shapes_yolo_nms_fp16.onnx"
    r = run_cli("layerwise", str(ref), str(cand), "--out", str(tmp_path))
    assert r.code == 0, r.out + r.err
    c = _stage(tmp_path, "layerwise")["candidates"][0]
    convs = {n.output[0] for n in onnx.load(str(ref)).graph.node if n.op_type == "Conv"}
    compared = {row["tensor"] for row in c["rows"] if not row.get("not_comparable")}
    assert convs and convs <= compared
    assert not c.get("after_plugins")
    (det,) = c["detections"]
    assert det["layout"] == "nms4" and det["op_type"] == "EfficientNMS_TRT" and det["reference_boxes"] > 0
    assert det["tensors"] == ["num_dets", "det_boxes", "det_scores", "det_classes"] and det["passed"]


def test_a_user_plugin_without_a_hook_is_named_and_with_one_everything_is_compared(tmp_path: Path):
    ref, cand = PLUGINS / "shapes_plugin_nms.onnx", PLUGINS / "shapes_plugin_nms_fp16.onnx"
    r = run_cli("layerwise", str(ref), str(cand), "--out", str(tmp_path / "bare"))
    assert r.code == 1
    assert "after plugin ShapesBoxDecode" in r.out and "graph outputs compared" in r.out
    r = run_cli("layerwise", str(ref), str(cand), "--plugin", "ShapesBoxDecode=shapes_plugins:decode",
                "--out", str(tmp_path / "hooked"), cwd=PLUGINS)  # fmt: skip
    assert r.code == 0, r.out + r.err
    c = _stage(tmp_path / "hooked", "layerwise")["candidates"][0]
    assert not c.get("after_plugins") and all(not row.get("not_comparable") for row in c["rows"])
    decode = [n.output[0] for n in onnx.load(str(ref)).graph.node if n.op_type == "ShapesBoxDecode"]
    assert decode[0] in {row["tensor"] for row in c["rows"]}  # the plugin's own output is compared too


def test_e2e_reads_the_nms_plugins_outputs_computed_by_the_built_in_reference(tmp_path: Path, val, raw_heads):
    """The built-in EfficientNMS_TRT reference, fed by the export, gives the detections the raw head's plain
    per-class NMS gives (same thresholds): the same mAP, by pycocotools."""
    doc, _ = val
    suite = write_suite(tmp_path, PLUGINS / "shapes_yolo_nms.onnx", PLUGINS / "shapes_yolo_nms_fp16.onnx",
                        {"layout": "nms"})  # fmt: skip
    r = run_cli("run", str(suite), "--out", str(tmp_path / "o"))
    assert r.code == 0, r.out + r.err
    stage = _stage(tmp_path / "o", "e2e")
    expected = pycocotools_map(doc, [plain_nms(h) for h in raw_heads])
    assert stage["reference"]["map"] == pytest.approx(expected, abs=1e-9)
    assert RAW.is_file() and NMS["max_detections"] == 100


def test_framework_compares_pytorchs_detections_with_the_exports(tmp_path: Path):
    pytest.importorskip("torch")
    r = run_cli("run", str(ROOT / "suites" / "plugins_detection.yaml"), "--stage", "framework", "--update-reference",
                "--reference-dir", str(tmp_path / "store"), "--out", str(tmp_path / "o"))  # fmt: skip
    assert r.code == 0, r.out + r.err
    stage = _stage(tmp_path / "o", "framework")
    assert stage["reference"]["source"] == "pytorch"
    (det,) = stage["detections"]
    assert det["layout"] == "nms4" and det["reference_boxes"] == det["matched"] > 0
    assert det["metrics"]["mean_iou"] > 0.9999
    assert "boxes in num_dets, det_boxes, det_scores, det_classes (nms4)" in r.out
    assert "<h4>Detections</h4>" in (tmp_path / "o" / "report.html").read_text()


def test_int8_of_a_detector_ending_in_a_plugin_is_quantized_up_to_it(tmp_path: Path):
    """ONNX Runtime's quantize_static runs the graph to calibrate and refuses a plugin node: trtverify quantizes the
    part before the plugin and puts the plugin back. The candidate it makes is compared like any other."""
    import numpy as np

    ref = PLUGINS / "shapes_yolo_nms.onnx"
    np.savez(tmp_path / "calib.npz", images=np.random.default_rng(0).random((8, 3, 128, 128), dtype=np.float32))
    out = tmp_path / "int8.onnx"
    calib = str(tmp_path / "calib.npz")
    r = run_cli("convert", str(ref), "--precision", "int8", "--calibration", calib, "-o", str(out))
    assert r.code == 0, r.out + r.err
    ops = [n.op_type for n in onnx.load(str(out)).graph.node]
    assert ops.count("QuantizeLinear") >= 10 and ops.count("EfficientNMS_TRT") == 1
    assert ops.index("EfficientNMS_TRT") > max(i for i, op in enumerate(ops) if op == "QuantizeLinear")
    r = run_cli("layerwise", str(ref), str(out), "--out", str(tmp_path / "lw"))
    assert r.code == 0, r.out + r.err
    (det,) = _stage(tmp_path / "lw", "layerwise")["candidates"][0]["detections"]
    assert det["reference_boxes"] > 0 and det["passed"]


def test_perf_times_a_plugin_model_and_says_its_plugin_ran_as_a_reference(tmp_path: Path):
    suite = tmp_path / "perf.yaml"
    suite.write_text(
        f"name: perfp\nreference_dir: {tmp_path / 'store'}\nmodels:\n  reference: {PLUGINS / 'shapes_yolo_nms.onnx'}\n"
        "inputs:\n  generate: {images: {shape: [1, 3, 128, 128], range: [0, 1]}}\nstages:\n  perf: {budget_s: 2}\n"
    )
    r = run_cli("run", str(suite), "--out", str(tmp_path / "o"))
    assert r.code == 0, r.out + r.err
    assert "reference: its time includes 1 plugin node (EfficientNMS_TRT '/EfficientNMS_TRT')" in r.out
    (row,) = _stage(tmp_path / "o", "perf")["rows"]
    assert row["median_ms"] > 0


def test_init_writes_a_plugins_section_naming_what_needs_a_reference(tmp_path: Path):
    r = run_cli("init", str(PLUGINS / "shapes_plugin_nms.onnx"), "-o", str(tmp_path / "s.yaml"))
    assert r.code == 0, r.out + r.err
    text = (tmp_path / "s.yaml").read_text()
    assert "\nplugins:\n  ShapesBoxDecode: my_plugins:shapesboxdecode" in text
    assert "  # EfficientNMS_TRT: built-in reference" in text
    r = run_cli("init", str(RAW), "-o", str(tmp_path / "raw.yaml"))  # no plugin node: no section
    assert r.code == 0 and "plugins:" not in (tmp_path / "raw.yaml").read_text()


def test_fp16_by_the_converter_with_the_plugin_blocked_matches_every_box_and_names_the_plugins(tmp_path: Path):
    """ONNX Runtime's float16 converter with EfficientNMS_TRT in its block list, as users run it (no clean-up after):
    it wraps the plugin's inputs and float outputs in Casts. The tensors before the plugin agree, so every
    reference box is matched; the terminal names each plugin node and what computed it."""
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST, convert_float_to_float16

    ref = PLUGINS / "shapes_plugin_nms.onnx"
    block = [*DEFAULT_OP_BLOCK_LIST, "EfficientNMS_TRT"]
    m = convert_float_to_float16(onnx.load(str(ref)), keep_io_types=True, op_block_list=block)
    nms = next(n for n in m.graph.node if n.op_type == "EfficientNMS_TRT")
    casts = {n.input[0] for n in m.graph.node if n.op_type == "Cast"}
    assert all(i.endswith("_cast_to_fp32") for i in nms.input) and set(nms.output[1:3]) <= casts  # wrapped
    onnx.save(m, str(tmp_path / "fp16.onnx"))
    r = run_cli("layerwise", str(ref), str(tmp_path / "fp16.onnx"), "--plugin", "ShapesBoxDecode=shapes_plugins:decode",
                "--out", str(tmp_path / "o"), cwd=PLUGINS)  # fmt: skip
    assert r.code == 0, r.out + r.err
    (det,) = _stage(tmp_path / "o", "layerwise")["candidates"][0]["detections"]
    assert det["reference_boxes"] > 50 and det["matched"] == det["reference_boxes"] == det["candidate_boxes"]
    assert "fp16: plugin EfficientNMS_TRT '/EfficientNMS_TRT' by trtverify's built-in numpy reference" in r.out
    assert "fp16: plugin ShapesBoxDecode '/ShapesBoxDecode' by the user's reference shapes_plugins:decode" in r.out
