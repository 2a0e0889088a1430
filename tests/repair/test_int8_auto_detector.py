"""`--method auto` on a detector (issue 45, item 5): torchvision's SSDlite as users export it
(tests/data/torchvision/make_models.py). auto judges each method on the tensors flowing into the post-processing
(the per-class scores and decoded boxes of every anchor), not on the NMS outputs (boxes, scores and labels of
ranked, selected detections, whose element-wise error means nothing); every calibrator shows its progress,
histograms and threshold search included; and a method whose range computation passes auto's budget is stopped and
not compared. Real ONNX Runtime on the committed export."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from trtverify.repair import calibrate  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data" / "torchvision"
DETECTIONS = 50  # the export's detections_per_img: every output has at most this many rows


def _rows() -> list[dict[str, np.ndarray]]:
    """4 rows (3 calibrated on, 1 held out): the two committed images and the two again with noise."""
    images = np.load(DATA / "inputs.npz", allow_pickle=False)["image"]
    rng = np.random.default_rng(0)
    noisy = [np.clip(x + rng.normal(0, 0.05, x.shape), 0, 1).astype(np.float32) for x in images]
    return [{"image": x} for x in (*images, *noisy)]


def _shapes(model: Path, names: list[str], feed: dict[str, np.ndarray]) -> dict[str, tuple[int, ...]]:
    """The shapes the FP32 reference gives `names` on `feed` (ONNX Runtime, those tensors exposed)."""
    import onnxruntime as ort

    from trtverify.graph.lightmodel import EXTERNAL_FOLDER, LightModel

    run = LightModel(model).with_outputs(names)
    so = ort.SessionOptions()
    so.add_session_config_entry(EXTERNAL_FOLDER, str(run.folder))
    session = ort.InferenceSession(run.data, sess_options=so, providers=["CPUExecutionProvider"])
    return {n: a.shape for n, a in zip(names, session.run(names, feed))}


def test_auto_judges_the_heads_before_nms_and_stops_a_method_over_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a budget of 0 s: entropy's threshold search (109 tensors here, minutes) is stopped after its first two
    monkeypatch.setattr(calibrate, "BUDGET_FACTOR", 0.0)
    monkeypatch.setattr(calibrate, "BUDGET_FLOOR_S", 0.0)
    lines: list[str] = []
    model, rows = DATA / "ssdlite.onnx", _rows()
    choice = calibrate.choose(model, tmp_path / "q.onnx", rows, progress=lines.append)
    err = "\n".join(lines)

    # judged: the tensors flowing into NMS/TopK/NonZero/If, one row per anchor, not the outputs (<= 50 rows)
    judged = list(choice.judged)
    assert judged and not set(judged) & {"boxes", "scores", "labels"}, err
    assert "post-processing" in choice.judged_why and "TopK" in choice.judged_why, choice.judged_why
    shapes = _shapes(model, [*judged, "boxes", "labels"], rows[3])
    anchors = shapes[judged[0]][0]
    assert anchors > DETECTIONS and shapes["boxes"][0] <= DETECTIONS, shapes
    # SSDlite's heads: the decoded boxes [A, 4] and one score per anchor for each of its 3 foreground classes
    assert sorted(shapes[t] for t in judged) == [(anchors,)] * 3 + [(anchors, 4)], shapes
    assert f"judging each method on {choice.judged_why}: {judged[0]}" in err

    # the bound: entropy stopped and said so; auto's calibrations: the 3 methods on the fit rows, then 1 on all
    assert set(choice.skipped) == {"entropy"} and "over auto's budget of 0 s" in choice.skipped["entropy"], err
    assert re.search(r"entropy: not compared: its range computation would take about \d+ s \(2/\d+ tensors", err)
    assert set(choice.figures) == {"minmax", "percentile"} and choice.method == min(
        choice.figures, key=lambda m: choice.figures[m]
    )
    starts = [x for x in lines if re.fullmatch(r"\w+ calibration: 0/\d+ rows", x)]
    assert starts == [
        "minmax calibration: 0/3 rows",
        "entropy calibration: 0/3 rows",
        "percentile calibration: 0/3 rows",
        f"{choice.method} calibration: 0/4 rows",
    ], err
    # progress in every calibrator's every phase: rows, histograms (entropy, percentile), threshold search
    for method in ("entropy", "percentile"):
        assert re.search(rf"^{method} calibration: histograms of (\d+)/\1 tensors \([0-9.]+ s\)$", err, re.M), err
    assert re.search(r"^entropy calibration: thresholds of 0/\d+ tensors", err, re.M), err
    assert re.search(r"^percentile calibration: ranges of \d+ tensors", err, re.M), err

    record = choice.record()
    assert record["judged"] == judged and set(record["skipped"]) == {"entropy"}
    assert set(record["figures"]) == {"minmax", "percentile"}


def test_convert_reads_rows_of_a_model_without_a_batch_axis(tmp_path: Path) -> None:
    """torchvision's detectors take one image [3, H, W]: row i of the .npz is image[i], not image[i:i+1]."""
    from trtverify.cli.repair import _rows as read_rows

    images = np.load(DATA / "inputs.npz", allow_pickle=False)["image"]
    rows = read_rows(DATA / "ssdlite.onnx", DATA / "inputs.npz")
    assert [r["image"].shape for r in rows] == [images.shape[1:]] * len(images)
    assert all(np.array_equal(r["image"], x) for r, x in zip(rows, images))
