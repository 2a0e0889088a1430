"""`trtverify init` on detectors: the e2e example is detection with the layout read from the graph, not
classification. Two detectors made as users make theirs: torchvision's SSD exported by torch.onnx.export
(ONNX NonMaxSuppression inside an If; tests/data/detector/make_ssd.py) and the shapes detector exported with
EfficientNMS_TRT at its end as YOLO exporters write it (demo/plugins/make_demo.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.cli.commands.test_init import _examples, _uncomment
from tests.conftest import DATA, ROOT, TINY, main_in_process

SSD = DATA / "detector" / "ssd_tiny.onnx"
PLUGIN_NMS = ROOT / "demo" / "plugins" / "shapes_plugin_nms.onnx"


def _init(model: Path, folder: Path, capsys, monkeypatch) -> str:
    out = folder / f"{model.stem}.yaml"
    r = main_in_process(["init", str(model), "-o", str(out)], capsys, monkeypatch)
    assert r.code == 0, r.err
    return out.read_text()


def test_init_on_an_efficientnms_detector_writes_a_detection_example_that_validates(tmp_path, capsys, monkeypatch):
    shutil.copy(PLUGIN_NMS, tmp_path / "model.onnx")
    (tmp_path / "val").symlink_to(ROOT / "demo" / "shapes" / "val")
    text = _init(tmp_path / "model.onnx", tmp_path, capsys, monkeypatch)
    assert "#   task: detection" in text and "task: classification" not in text
    assert "EfficientNMS_TRT node '/EfficientNMS_TRT' ends the model" in text
    assert "#   # layout found: the EfficientNMS_TRT node's outputs are the model's" in text
    assert (
        "#   postprocess: {layout: nms, outputs: {count: num_dets, boxes: det_boxes, scores: det_scores, "
        "classes: det_classes}}" in text
    )
    assert "resize: [128, 128]" in text  # the input's size, not a classifier's 224
    (e2e,) = [(a, b) for a, b in _examples(text) if text.splitlines()[a].strip().startswith("# e2e:")]
    suite = tmp_path / "uncommented.yaml"
    suite.write_text(_uncomment(text, *e2e).replace("my_plugins:shapesboxdecode", "shapes_plugins:decode"))
    (tmp_path / "shapes_plugins.py").write_text((ROOT / "demo" / "plugins" / "shapes_plugins.py").read_text())
    r = main_in_process(["validate", str(suite)], capsys, monkeypatch)
    assert r.code == 0, r.err


def test_init_on_a_torchvision_detector_names_its_nms_and_its_layout(tmp_path, capsys, monkeypatch):
    text = _init(SSD, tmp_path, capsys, monkeypatch)
    assert "ONNX NonMaxSuppression ends the model" in text  # found inside the If that torchvision exports
    assert "#   task: detection" in text and "task: classification" not in text
    assert "#   # layout found: outputs boxes [K, 4], scores [K], labels [K] (torchvision's detection models" in text
    assert "#   postprocess: {layout: torchvision, outputs: {boxes: boxes, scores: scores, labels: labels}}" in text


def test_init_on_outputs_no_layout_fits_asks_for_a_hook(tmp_path, capsys, monkeypatch):
    """The same torchvision detector with its scores output dropped: no built-in layout reads it."""
    import onnx

    model = onnx.load(str(SSD))
    kept = [o for o in model.graph.output if o.name != "scores"]
    del model.graph.output[:]
    model.graph.output.extend(kept)
    onnx.save(model, str(tmp_path / "no_scores.onnx"))
    text = _init(tmp_path / "no_scores.onnx", tmp_path, capsys, monkeypatch)
    assert "outputs boxes [?, 4], labels [?] fit no built-in layout" in text
    assert '#   postprocess: {hook: "my_postprocess:decode"}' in text


def test_init_on_a_classifier_keeps_the_classification_example(tmp_path, capsys, monkeypatch):
    text = _init(TINY / "tiny.onnx", tmp_path, capsys, monkeypatch)
    assert "#   task: classification" in text and "task: detection" not in text
