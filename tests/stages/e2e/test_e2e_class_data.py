"""Where an e2e result keeps its per-class data: inline up to 100 classes, in the class-data file above, for every
task with per-class rows (classification, segmentation, detection). Real accumulators on real predictions; the
stage's finalize step, without models (the CLI run is tests/stages/e2e/test_e2e_many_classes.py)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from trtverify.config.stages import E2EStage
from trtverify.stages.e2e.classdata import INLINE_CLASSES, class_arrays, dropped_most, npz_bytes, pack
from trtverify.stages.e2e.stage import _Model, finalize
from trtverify.tasks.base import Task, class_deltas
from trtverify.tasks.classification import ClassificationTask
from trtverify.tasks.detection import CategoryDelta
from trtverify.tasks.segmentation import SegmentationTask
from trtverify.util.fsutil import to_json


def _open(task: type[Task], tmp_path: Path, arrays: dict[str, np.ndarray], classes: int, gate: str) -> Task:
    np.savez(tmp_path / "val.npz", **arrays)
    dataset = {"npz": str(tmp_path / "val.npz"), "class_names": [f"c{i}" for i in range(classes)]}
    cfg = E2EStage(task=task.name, dataset=dataset, gates=[{"metric": gate, "max_drop": 1.0}])
    return task.open(cfg)


def _load(data: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def _classification(tmp_path: Path, classes: int, n: int = 300):
    """A reference right on 90 % of the samples and a candidate that flips a fifth of its predictions."""
    rng = np.random.default_rng(classes)
    labels = rng.integers(0, classes, n)
    images = np.zeros((n, 2, 2, 3), np.uint8)
    task = _open(ClassificationTask, tmp_path, {"images": images, "labels": labels}, classes, "accuracy")
    ref_pred = np.where(rng.random(n) < 0.9, labels, rng.integers(0, classes, n))
    cand_pred = np.where(rng.random(n) < 0.8, ref_pred, rng.integers(0, classes, n))
    models = []
    for name, pred in (("reference", ref_pred), ("int8", cand_pred)):
        scores = rng.random((n, classes)).astype(np.float32)
        scores[np.arange(n), pred] = 2.0
        acc = task.accumulator()
        task.update(acc, range(n), scores, labels)
        models.append(_Model(name, None, acc))
    return task, models


@pytest.mark.parametrize("classes", [INLINE_CLASSES, INLINE_CLASSES + 1])
def test_up_to_100_classes_stay_inline_and_more_go_to_the_class_file(tmp_path: Path, classes: int):
    task, models = _classification(tmp_path, classes)
    computed = {m.name: m.acc.compute() for m in models}
    result = finalize(task, models, 300)
    cand = result.candidates[0]
    every = task.per_class(computed["reference"], computed["int8"])
    assert cand.confused == task.confused(computed["reference"], computed["int8"], 20) and cand.confused
    if classes <= INLINE_CLASSES:  # as before: every class inline, in class order; no file
        assert result.class_data is None and result.files == {}
        assert result.reference == computed["reference"] and len(result.reference.confusion) == classes
        assert cand.per_class == every
        return
    assert result.reference.confusion is None and result.reference.per_class is None
    assert cand.metrics.confusion is None and cand.metrics.scalars() == computed["int8"].scalars()
    drops = [r.delta_f1 for r in cand.per_class]
    assert len(cand.per_class) == 20 and drops == sorted(drops) and all(d < 0 for d in drops)
    assert drops[-1] <= min(r.delta_f1 for r in every if r not in cand.per_class and r.delta_f1 < 0)
    record = result.class_data
    assert record.path == "e2e-classes.npz" and list(result.files) == [record.path]
    arrays = _load(result.files[record.path])
    assert record.arrays == {k: list(v.shape) for k, v in arrays.items()}
    for k, name in enumerate(["reference", "int8"]):
        m = computed[name]
        assert np.array_equal(arrays["confusion"][k], np.array(m.confusion))
        for field in ("precision", "recall", "f1", "support"):
            assert arrays[field][k].tolist() == [getattr(r, field) for r in m.per_class]
    # the result written and read back keeps the record, and the file's bytes depend on its arrays alone
    assert pack(computed, record.path)[0] == record
    assert json.loads(to_json(result.dump()))["class_data"]["sha256"] == record.sha256


def test_segmentation_with_150_classes_moves_its_pixel_confusion_matrix_out(tmp_path: Path):
    rng = np.random.default_rng(1)
    classes, n = 150, 6
    masks = rng.integers(0, classes, (n, 16, 16)).astype(np.uint8)
    task = _open(
        SegmentationTask, tmp_path, {"images": np.zeros((n, 16, 16, 3), np.uint8), "masks": masks}, 150, "miou"
    )
    models = []
    for name, flip in (("reference", 0.05), ("fp16", 0.2)):
        pred = np.where(rng.random(masks.shape) < flip, rng.integers(0, classes, masks.shape), masks)
        acc = task.accumulator()
        acc.update(list(range(n)), list(masks), list(pred), classes)
        models.append((_Model(name, None, acc), pred))
    result = finalize(task, [m for m, _ in models], n)
    arrays = _load(result.files[result.class_data.path])
    assert result.reference.confusion is None and arrays["confusion"].shape == (2, classes, classes)
    for k, (_, pred) in enumerate(models):
        want = np.bincount(masks.ravel().astype(np.int64) * classes + pred.ravel(), minlength=classes * classes)
        assert np.array_equal(arrays["confusion"][k], want.reshape(classes, classes))
    assert arrays["predicted"][0].tolist() == np.bincount(models[0][1].ravel(), minlength=classes).tolist()
    cand = result.candidates[0]
    assert cand.confused and cand.confused[0].candidate > cand.confused[0].reference
    assert 0 < len(cand.per_class) <= 20 and all(r.delta_iou < 0 for r in cand.per_class)


def test_detection_categories_go_to_columns_and_undefined_drops_are_not_listed():
    from tests.tasks.test_detection import accumulate, make_detections, make_gt

    gt = make_gt(40)
    # 120 categories, most of them without ground truth (their AP is NaN: nothing to measure)
    gt["categories"] += [{"id": 100 + i, "name": f"extra{i}"} for i in range(117)]
    dets = make_detections(gt)
    worse = {k: v.copy() for k, v in dets.items()}
    for v in worse.values():
        v[:, 4] *= np.linspace(1.0, 0.2, len(v))  # a candidate with lower scores
    metrics = {"reference": accumulate(gt, dets).compute(), "int8": accumulate(gt, worse).compute()}
    arrays = class_arrays(metrics)
    assert arrays["category_id"].tolist() == [c["id"] for c in gt["categories"]]
    assert arrays["ap"].shape == (2, 120) and "confusion" not in arrays
    assert arrays["ap"][1].tolist() == pytest.approx([r.ap for r in metrics["int8"].per_class], nan_ok=True)
    ref, cand = metrics["reference"].per_class, metrics["int8"].per_class
    deltas = class_deltas(ref, cand, "category_id", "ap", CategoryDelta)  # the detection task's per_class
    assert any(r.delta_ap != r.delta_ap for r in deltas)  # NaN: categories without ground truth
    listed = dropped_most(deltas, 20)
    assert listed and all(r.delta_ap < 0 for r in listed) and all(r.category_id < 100 for r in listed)


def test_the_file_is_a_plain_npz_whose_bytes_depend_on_its_arrays_alone():
    arrays = {"models": np.array(["reference", "fp16"]), "f1": np.array([[0.5, np.nan], [1.0, 0.0]])}
    data = npz_bytes(arrays)
    assert npz_bytes(arrays) == data  # no timestamps
    back = _load(data)
    assert back["models"].tolist() == ["reference", "fp16"] and np.array_equal(back["f1"], arrays["f1"], equal_nan=True)
