"""Keypoint metrics against pycocotools run directly on the COCO file (AP/AR of COCOeval(iouType='keypoints'), its
computeOks), and PCK and the heatmap-to-image mapping against cases computed by hand."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from trtverify.config.stages import E2EStage
from trtverify.tasks.batches import Batch
from trtverify.tasks.keypoints import (
    COCO_SIGMAS,
    KPT_STATS,
    KeypointAccumulator,
    KeypointTask,
    KeypointTruth,
    crop_box,
    decode_heatmaps,
    oks,
)
from trtverify.util.errors import UsageError

K = 4
SIGMAS = np.array([0.05, 0.08, 0.1, 0.07])


def people(seed: int, images: int = 5) -> dict:
    """A COCO keypoints file: 1-3 persons per image, some keypoints unlabelled, a crowd region on image 1."""
    rng = np.random.default_rng(seed)
    anns, n = [], 0
    for img in range(1, images + 1):
        for _ in range(rng.integers(1, 4)):
            n += 1
            x, y, w, h = rng.uniform(0, 200), rng.uniform(0, 200), rng.uniform(20, 150), rng.uniform(20, 150)
            kp = np.column_stack([rng.uniform(x, x + w, K), rng.uniform(y, y + h, K), rng.choice([0, 1, 2], K)])
            kp[0, 2] = 2
            kp[kp[:, 2] == 0, :2] = 0
            labelled = int((kp[:, 2] > 0).sum())
            ann = {"id": n * 7, "image_id": img, "category_id": 1, "bbox": [x, y, w, h], "area": w * h * 0.6}
            anns.append({**ann, "iscrowd": 0, "keypoints": kp.ravel().tolist(), "num_keypoints": labelled})
    anns.append({"id": 999, "image_id": 1, "category_id": 1, "bbox": [0, 0, 60, 60], "area": 3600.0, "iscrowd": 1,
                 "keypoints": [0] * 3 * K, "num_keypoints": 0})  # fmt: skip
    return {
        "images": [{"id": i, "file_name": f"{i}.png", "width": 400, "height": 400} for i in range(1, images + 1)],
        "annotations": anns,
        "categories": [{"id": 1, "name": "person", "keypoints": ["a", "b", "c", "d"]}],
    }


def noisy(truth: KeypointTruth, seed: int, scale: float) -> np.ndarray:
    """Predictions [N, K, 3]: the truth moved by Gaussian noise of `scale` x sqrt(area), random scores."""
    rng = np.random.default_rng(seed)
    xy = truth.xy + rng.normal(0, 1, truth.xy.shape) * scale * np.sqrt(truth.area)[:, None, None]
    return np.concatenate([xy, rng.uniform(0.2, 1, truth.xy.shape[:2] + (1,))], -1)


def pycocotools_stats(data: dict, pred: np.ndarray, truth: KeypointTruth) -> list[float]:
    """COCOeval on the file as it is, the predictions as COCO results (score: mean keypoint score)."""
    results = [
        {
            "image_id": a["image_id"],
            "category_id": 1,
            "score": float(p[:, 2].mean()),
            "keypoints": np.column_stack([p[:, :2], np.ones(K)]).ravel().tolist(),
        }  # fmt: skip
        for a, p in zip(truth.persons, pred)
    ]
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = json.loads(json.dumps(data))
        gt.createIndex()
        ev = COCOeval(gt, gt.loadRes(results), "keypoints")
        ev.params.kpt_oks_sigmas = SIGMAS
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return [float(s) if s > -1 else math.nan for s in ev.stats]


@pytest.mark.parametrize("seed, scale", [(1, 0.02), (2, 0.08), (3, 0.2)])
def test_ap_and_ar_equal_pycocotools_on_the_file_as_it_is(seed: int, scale: float):
    data = people(seed)
    truth = KeypointTruth(data, "t.json", None, 1.0, 1.25)
    assert len(truth.persons) == len(data["annotations"]) - 1  # the crowd region is no sample
    pred = noisy(truth, seed, scale)
    acc = KeypointAccumulator(truth, SIGMAS, 0.2)
    acc.update(range(len(pred)), list(pred))
    m = acc.compute()
    want = pycocotools_stats(data, pred, truth)
    got = [getattr(m, k) for k in KPT_STATS]
    assert got == pytest.approx(want, nan_ok=True, abs=1e-12)
    assert 0 < m.map < 1 or scale == 0.02


def test_per_person_oks_equals_pycocotools_computeoks():
    data = people(4, images=8)
    truth = KeypointTruth(data, "t.json", None, 1.0, 1.25)
    pred = noisy(truth, 4, 0.1)
    results = [
        {
            "image_id": a["image_id"],
            "category_id": 1,
            "score": 1.0,
            "keypoints": np.column_stack([p[:, :2], np.ones(K)]).ravel().tolist(),
        }  # fmt: skip
        for a, p in zip(truth.persons, pred)
    ]
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = data
        gt.createIndex()
        ev = COCOeval(gt, gt.loadRes(results), "keypoints")
        ev.params.kpt_oks_sigmas = SIGMAS
        ev.evaluate()
    ours = oks(pred[..., :2], truth.xy, truth.visible, truth.area, SIGMAS)
    for n, a in enumerate(truth.persons):  # computeOks: [detections, ground truth] of the image, both in file order
        dets = [i for i, b in enumerate(truth.persons) if b["image_id"] == a["image_id"]]
        gts = [b["id"] for b in data["annotations"] if b["image_id"] == a["image_id"]]
        table = np.asarray(ev.ious[(a["image_id"], 1)])
        assert ours[n] == pytest.approx(table[dets.index(n), gts.index(a["id"])], abs=1e-12)


def test_pck_by_hand():
    """bbox 50 x 100: the radius is 0.2 x 100 = 20 px. Keypoint 0 is 19.9 px off (hit), 1 exactly 20 (hit: <=),
    2 20.08 (miss), 3 unlabelled (not counted); in the second person a NaN prediction (miss) and a hit."""
    data = {
        "images": [{"id": 1, "file_name": "1.png"}],
        "annotations": [
            {
                "id": 1,
                "image_id": 1,
                "category_id": 1,
                "bbox": [10, 10, 50, 100],
                "keypoints": [20, 20, 2, 30, 30, 1, 40, 40, 2, 0, 0, 0],
            },
            {
                "id": 2,
                "image_id": 1,
                "category_id": 1,
                "bbox": [100, 10, 50, 100],
                "keypoints": [120, 20, 2, 130, 30, 2, 0, 0, 0, 0, 0, 0],
            },
        ],  # fmt: skip
        "categories": [{"id": 1, "name": "person", "keypoints": ["a", "b", "c", "d"]}],
    }
    truth = KeypointTruth(data, "t.json", None, 1.0, 1.25)
    pred = np.array(
        [[[20 + 19.9, 20, 1], [30, 30 - 20, 1], [40 + 12, 40 + 16.1, 1], [500, 500, 1]],  # sqrt(12^2 + 16.1^2) = 20.08
         [[np.nan, np.nan, 0], [130 + 12, 30 + 16, 1], [0, 0, 1], [0, 0, 1]]]  # 20: sqrt(12^2 + 16^2)
    )  # fmt: skip
    assert math.hypot(12, 16.1) > 20 and math.hypot(12, 16) == 20
    acc = KeypointAccumulator(truth, SIGMAS, 0.2)
    acc.update([0, 1], list(pred))
    m = acc.compute()
    assert m.pck == pytest.approx(3 / 5)  # 5 labelled keypoints, hits: 0 and 1 of person 1, 1 of person 2
    rows = m.per_class
    assert [r.pck for r in rows[:3]] == pytest.approx([1 / 2, 2 / 2, 0 / 1]) and math.isnan(rows[3].pck)
    assert [r.labelled for r in rows] == [2, 2, 1, 0]
    # OKS by hand, person 1 (area = bbox 5000): keypoints 0, 1, 2 labelled
    e = np.array([19.9**2, 20**2, 12**2 + 16.1**2]) / (2 * SIGMAS[:3]) ** 2 / 5000 / 2
    assert acc.per_person()[0] == pytest.approx(np.exp(-e).mean())


def test_state_and_merge_give_the_whole_run():
    data = people(5)
    truth = KeypointTruth(data, "t.json", None, 1.0, 1.25)
    pred = noisy(truth, 5, 0.1)
    whole = KeypointAccumulator(truth, SIGMAS, 0.2)
    whole.update(range(len(pred)), list(pred))
    a, b = KeypointAccumulator(truth, SIGMAS, 0.2), KeypointAccumulator(truth, SIGMAS, 0.2)
    a.update(range(3), list(pred[:3]))
    b.update(range(3, len(pred)), list(pred[3:]))
    merged = KeypointAccumulator.from_state(a.state(), truth, SIGMAS, 0.2)
    merged.merge(KeypointAccumulator.from_state(b.state(), truth, SIGMAS, 0.2))
    assert merged.compute() == whole.compute()
    with pytest.raises(ValueError, match="overlap"):
        merged.merge(a)


def test_heatmap_peak_quarter_shift_and_nan():
    hm = np.zeros((1, 3, 8, 10), np.float32)
    hm[0, 0, 3, 5], hm[0, 0, 3, 6], hm[0, 0, 2, 5] = 1.0, 0.5, 0.2  # right and up neighbours higher
    hm[0, 1, 0, 0] = 1.0  # at the border: no shift
    hm[0, 2] = np.nan
    hm[0, 2, 4, 4] = np.inf  # +inf is the peak
    kp, bad = decode_heatmaps(hm)
    assert kp[0, 0].tolist() == [5.25, 2.75, 1.0] and kp[0, 1].tolist() == [0, 0, 1.0]
    assert kp[0, 2, :2].tolist() == [4, 4] and bad == 1  # its heatmap holds NaN and inf
    hm[0, 2] = np.nan
    kp, bad = decode_heatmaps(hm, refine=False)
    assert bad == 1 and np.isnan(kp[0, 2, :2]).all() and kp[0, 0, :2].tolist() == [5, 3]


def test_task_maps_heatmap_peaks_to_image_pixels(tmp_path: Path):
    """A 64x48 crop (bbox 40x30 around (60, 45), padding 1.25, aspect 4:3 of a 48x64 input): heatmap [12, 16]
    pixel (x=8, y=6) -> crop ((8 + 0.5) x 50 / 16 - 0.5, (6 + 0.5) x 38 / 12 - 0.5) -> + the crop's (35, 26)."""
    (tmp_path / "images").mkdir()
    Image.fromarray(np.zeros((100, 120, 3), np.uint8)).save(tmp_path / "images" / "a.png")
    data = {
        "images": [{"id": 3, "file_name": "a.png"}],
        "annotations": [
            {"id": 1, "image_id": 3, "category_id": 1, "bbox": [40, 30, 40, 30], "keypoints": [50, 40, 2, 70, 50, 2]}
        ],  # fmt: skip
        "categories": [{"id": 1, "name": "person", "keypoints": ["l", "r"]}],
    }
    (tmp_path / "kp.json").write_text(json.dumps(data))
    cfg = E2EStage.model_validate({
        "task": "keypoints", "dataset": {"coco": str(tmp_path / "kp.json")}, "preprocess": {"resize": [48, 64]},
        "options": {"sigmas": [0.05, 0.05], "refine": "none"}, "gates": [{"metric": "pck", "max_drop": 0.1}],
    })  # fmt: skip
    task = KeypointTask.open(cfg)
    box = crop_box([40, 30, 40, 30], 64 / 48, 1.25)
    assert box == (35, 26, 50, 38) and tuple(task.reader.truth.crops[0]) == box
    image = task.reader.image(0)
    assert image.shape == (38, 50, 3)
    hm = np.zeros((1, 2, 12, 16), np.float32)
    hm[0, 0, 6, 8] = hm[0, 1, 0, 15] = 1
    kp, bad = task.postprocess({"heatmaps": hm}, Batch([0], np.zeros((1, 3, 48, 64)), [None], [(38, 50)]), "m")
    assert bad == 0
    assert kp[0][0, :2] == pytest.approx([35 + 8.5 * 50 / 16 - 0.5, 26 + 6.5 * 38 / 12 - 0.5])
    assert kp[0][1, :2] == pytest.approx([35 + 15.5 * 50 / 16 - 0.5, 26 + 0.5 * 38 / 12 - 0.5])
    with pytest.raises(UsageError, match=r"not heatmaps \[1, 2, H, W\]"):
        task.postprocess({"heatmaps": hm[:, :1]}, Batch([0], hm, [None], [(38, 50)]), "m")


def test_sigmas_are_required_beyond_coco_persons(tmp_path: Path):
    data = people(6)
    (tmp_path / "kp.json").write_text(json.dumps(data))
    spec = {"task": "keypoints", "dataset": {"coco": str(tmp_path / "kp.json")}, "gates": [{"metric": "map", "min": 0}]}
    with pytest.raises(UsageError, match="4 keypoints, not COCO's 17: give their OKS sigmas"):
        KeypointTask.open(E2EStage.model_validate(spec))
    with pytest.raises(UsageError, match="3 sigmas for 4 keypoints"):
        KeypointTask.open(E2EStage.model_validate({**spec, "options": {"sigmas": [0.1] * 3}}))
    with pytest.raises(ValueError, match="sigmas must be"):
        E2EStage.model_validate({**spec, "options": {"sigmas": [0.1, -1]}})
    assert len(COCO_SIGMAS) == 17 and COCO_SIGMAS[0] == pytest.approx(0.026)


@pytest.mark.parametrize(
    "text, message",
    [
        ("{", "not valid JSON"),
        ('{"images": [], "annotations": {}}', "lists 'images' and 'annotations'"),
        (
            '{"images": [{"id": 1}], "annotations": [{"image_id": 1, "bbox": [0, 0, 5, 5], "keypoints": [1, 2]}]}',
            r"annotations\[0\] 'keypoints' must be",
        ),  # fmt: skip
        (
            '{"images": [{"id": 1}], "annotations": [{"image_id": 1, "bbox": [0, 0, 5, 5], "keypoints": [1, 2, 0]}]}',
            "no person with labelled keypoints",
        ),  # fmt: skip
    ],
)
def test_a_broken_keypoints_file_is_a_usage_error_naming_it(tmp_path: Path, text: str, message: str):
    path = tmp_path / "kp.json"
    path.write_text(text)
    cfg = E2EStage.model_validate(
        {
            "task": "keypoints",
            "dataset": {"coco": str(path)},
            "options": {"sigmas": [0.1]},
            "gates": [{"metric": "map", "min": 0}],
        }  # fmt: skip
    )
    with pytest.raises(UsageError, match=message) as info:
        KeypointTask.open(cfg)
    assert str(path) in str(info.value)


def test_a_hook_gives_crop_pixels_and_a_nan_is_a_counted_miss(tmp_path: Path):
    (tmp_path / "images").mkdir()
    Image.fromarray(np.zeros((100, 120, 3), np.uint8)).save(tmp_path / "images" / "a.png")
    data = {
        "images": [{"id": 3, "file_name": "a.png"}],
        "annotations": [
            {"id": 1, "image_id": 3, "category_id": 1, "bbox": [40, 30, 40, 40], "keypoints": [50, 40, 2, 70, 50, 2]}
        ],
        "categories": [{"id": 1, "name": "person", "keypoints": ["l", "r"]}],
    }
    (tmp_path / "kp.json").write_text(json.dumps(data))
    (tmp_path / "kphook.py").write_text(
        "import numpy as np\n"
        "def decode(outputs, image_sizes):\n"
        "    assert image_sizes == [(50, 50)]\n"
        "    return np.array([[[10.0, 20.0], [np.nan, 3.0]]])\n"
    )
    cfg = E2EStage.model_validate(
        {
            "task": "keypoints",
            "dataset": {"coco": str(tmp_path / "kp.json")},
            "postprocess": {"hook": "kphook:decode"},
            "options": {"sigmas": [0.05, 0.05]},
            "gates": [{"metric": "pck", "max_drop": 0.1}],
        }
    )
    task = KeypointTask.open(cfg, [tmp_path])
    kp, bad = task.postprocess({"x": np.zeros(1)}, Batch([0], np.zeros((1, 3, 8, 8)), [None], [(50, 50)]), "m")
    assert tuple(task.reader.truth.crops[0]) == (35, 25, 50, 50) and bad == 1
    assert kp[0].tolist() == [[45.0, 45.0, 1.0], [35 + 24.5, 25 + 24.5, 0.0]]  # the NaN: the crop's centre, score 0
