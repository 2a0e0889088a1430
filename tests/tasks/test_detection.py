"""DetectionAccumulator against pycocotools on a small real COCO ground truth, plus hand-computed P/R/F1."""

import contextlib
import copy
import io
import json
import math
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from trtverify.tasks.coco import STAT_NAMES, GroundTruth, load_coco, validate_coco
from trtverify.tasks.detection import DetectionAccumulator
from trtverify.util.fsutil import to_json

CATEGORIES = [{"id": 1, "name": "person"}, {"id": 3, "name": "car"}, {"id": 18, "name": "dog"}]


def make_gt(n_images: int, seed: int = 0) -> dict:
    """A COCO instances dict: 1-4 boxes of 3 categories per image, all three size classes."""
    rng = np.random.default_rng(seed)
    images, anns = [], []
    for i in range(1, n_images + 1):
        w_img, h_img = 640, 480
        images.append({"id": i, "width": w_img, "height": h_img, "file_name": f"{i:06d}.jpg"})
        for _ in range(int(rng.integers(1, 5))):
            side = float(rng.choice([rng.uniform(10, 30), rng.uniform(35, 90), rng.uniform(100, 300)]))
            w, h = side * float(rng.uniform(0.6, 1.4)), side * float(rng.uniform(0.6, 1.4))
            x, y = float(rng.uniform(0, w_img - w)), float(rng.uniform(0, h_img - h))
            anns.append(
                {
                    "id": len(anns) + 1,
                    "image_id": i,
                    "category_id": int(rng.choice([1, 3, 18])),
                    "bbox": [x, y, w, h],
                    "area": w * h,
                    "iscrowd": 0,
                }
            )
    return {
        "info": {"description": "synthetic"},
        "images": images,
        "annotations": anns,
        "categories": copy.deepcopy(CATEGORIES),
    }


def make_detections(gt: dict, seed: int = 1) -> dict[int, np.ndarray]:
    """Jittered ground truth with scores, plus misses, wrong classes, duplicates and false positives."""
    rng = np.random.default_rng(seed)
    by_image: dict[int, list] = {}
    for a in gt["annotations"]:
        by_image.setdefault(a["image_id"], []).append(a)
    out = {}
    for img in gt["images"]:
        rows = []
        for a in by_image.get(img["id"], []):
            if rng.random() < 0.12:  # missed
                continue
            x, y, w, h = a["bbox"]
            j = rng.normal(0, 0.07, 4) * [w, h, w, h]
            x1, y1 = x + j[0], y + j[1]
            x2, y2 = max(x + w + j[2], x1 + 1), max(y + h + j[3], y1 + 1)
            cat = a["category_id"] if rng.random() > 0.1 else int(rng.choice([1, 3, 18]))  # some wrong classes
            score = float(np.clip(rng.normal(0.7, 0.2), 0.01, 1.0))
            rows.append([x1, y1, x2, y2, score, cat])
            if rng.random() < 0.1:  # a duplicate
                rows.append([x1 + 2, y1 + 2, x2 + 2, y2 + 2, score * 0.6, cat])
        for _ in range(int(rng.integers(0, 4))):  # false positives, mostly low scores
            x, y = rng.uniform(0, 500), rng.uniform(0, 380)
            w, h = rng.uniform(8, 140, 2)
            rows.append([x, y, x + w, y + h, float(rng.uniform(0.01, 0.6)), int(rng.choice([1, 3, 18]))])
        out[img["id"]] = np.array(rows, dtype=np.float64).reshape(-1, 6)
    return out


def accumulate(gt: dict, dets: dict[int, np.ndarray], ids: list[int] | None = None, **kw) -> DetectionAccumulator:
    acc = DetectionAccumulator(gt, **kw)
    ids = sorted(dets) if ids is None else ids
    for i in range(0, len(ids), 8):  # in batches, like the e2e stage
        batch = ids[i : i + 8]
        acc.update(batch, [dets[j] for j in batch])
    return acc


def pycoco(gt: dict, dets: dict[int, np.ndarray], img_ids: list[int]):
    """Plain pycocotools, independently of trtverify: the reference."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    results = [
        {"image_id": i, "category_id": int(r[5]), "bbox": [r[0], r[1], r[2] - r[0], r[3] - r[1]], "score": r[4]}
        for i in img_ids
        for r in dets[i].tolist()
    ]
    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO()
        coco_gt.dataset = copy.deepcopy(gt)
        coco_gt.createIndex()
        ev = COCOeval(coco_gt, coco_gt.loadRes(results), "bbox")
        ev.params.imgIds = img_ids
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return ev


def same(a: float, b: float, tol: float = 1e-12) -> bool:
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= tol


@pytest.fixture(scope="module")
def gt30() -> dict:
    return make_gt(30)


@pytest.fixture(scope="module")
def dets30(gt30: dict) -> dict[int, np.ndarray]:
    return make_detections(gt30)


@pytest.fixture(scope="module")
def acc30(gt30: dict, dets30: dict) -> DetectionAccumulator:
    return accumulate(gt30, dets30)


def test_backends_give_identical_coco_stats(gt30: dict, dets30: dict, acc30: DetectionAccumulator) -> None:
    fast = acc30.compute().dump()
    slow = acc30.compute(backend="pycocotools").dump()
    ref = pycoco(gt30, dets30, sorted(dets30)).stats
    assert fast["backend"] == "faster-coco-eval" and fast["images"] == 30
    assert fast["detections"] == sum(len(d) for d in dets30.values())
    for name, r in zip(STAT_NAMES, ref):
        r = math.nan if r == -1 else float(r)
        assert same(fast[name], slow[name]), (name, fast[name], slow[name])
        assert same(fast[name], r), (name, fast[name], r)
    assert 0.3 < fast["map"] < 0.9  # a realistic, imperfect detector
    for a, b in zip(fast["per_class"], slow["per_class"]):
        assert {k: v for k, v in a.items() if k not in ("ap", "ap50")} == {
            k: v for k, v in b.items() if k not in ("ap", "ap50")
        }
        assert same(a["ap"], b["ap"]) and same(a["ap50"], b["ap50"])


def test_per_class_ap_is_pycocotools_precision_array(gt30: dict, dets30: dict, acc30: DetectionAccumulator) -> None:
    ev = pycoco(gt30, dets30, sorted(dets30))
    p = ev.eval["precision"]  # [T, R, K, A, M]
    t50 = int(np.argmin(np.abs(ev.params.iouThrs - 0.5)))
    m = acc30.compute().dump()
    assert [c["category_id"] for c in m["per_class"]] == [1, 3, 18]
    assert [c["name"] for c in m["per_class"]] == ["person", "car", "dog"]
    for k, c in enumerate(m["per_class"]):
        s = p[:, :, k, 0, -1]
        assert same(c["ap"], float(np.mean(s[s > -1])))
        s50 = p[t50, :, k, 0, -1]
        assert same(c["ap50"], float(np.mean(s50[s50 > -1])))
    # the class APs average to the mAP (every class has ground truth here)
    assert same(np.mean([c["ap"] for c in m["per_class"]]), m["map"], 1e-12)


def test_per_image_ap_is_coco_on_that_image_alone(gt30: dict, dets30: dict, acc30: DetectionAccumulator) -> None:
    per = acc30.per_image()
    assert sorted(per) == list(range(1, 31))
    for i, v in per.items():
        r = float(pycoco(gt30, dets30, [i]).stats[0])
        assert same(v, math.nan if r == -1 else r), (i, v, r)
    assert len({round(v, 6) for v in per.values()}) > 5  # it does tell images apart


def tiny_gt() -> dict:
    return {
        "images": [{"id": i, "width": 300, "height": 300} for i in (1, 2, 3, 4)],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 10, 10], "area": 100, "iscrowd": 0},  # A
            {"id": 2, "image_id": 1, "category_id": 1, "bbox": [20, 20, 10, 10], "area": 100, "iscrowd": 0},  # B
            {"id": 3, "image_id": 1, "category_id": 2, "bbox": [50, 50, 20, 20], "area": 400, "iscrowd": 0},  # C
            {"id": 4, "image_id": 2, "category_id": 2, "bbox": [0, 0, 40, 40], "area": 1600, "iscrowd": 0},  # D
            {
                "id": 5,
                "image_id": 2,
                "category_id": 2,
                "bbox": [50, 0, 50, 50],
                "area": 2500,
                "iscrowd": 1,
            },  # E (crowd)
            {"id": 6, "image_id": 3, "category_id": 3, "bbox": [10, 10, 10, 10], "area": 100, "iscrowd": 0},  # F
        ],
        "categories": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}, {"id": 3, "name": "c"}],
    }


def tiny_dets() -> dict[int, np.ndarray]:
    return {
        1: np.array(
            [
                [0, 0, 10, 10, 0.9, 1],  # A, IoU 1: tp
                [1, 0, 11, 10, 0.8, 1],  # IoU .82 with A, already taken: fp
                [20, 20, 30, 30, 0.2, 1],  # B but below the score threshold: B is a fn
                [50, 50, 70, 70, 0.95, 1],  # on C with the wrong class: fp for class 1
                [55, 55, 75, 75, 0.5, 2],  # IoU 225/575 = .39 with C: fp, and C a fn
            ]
        ),
        2: np.array(
            [
                [0, 0, 40, 30, 0.6, 2],  # D, IoU .75: tp
                [60, 10, 80, 30, 0.7, 2],  # inside the crowd box E: neither tp nor fp
            ]
        ),
        3: np.zeros((0, 6)),  # F missed: fn
        4: np.array([[200, 200, 210, 210, 0.4, 3]]),  # no ground truth here: fp
    }


def test_precision_recall_f1_by_hand() -> None:
    acc = accumulate(tiny_gt(), tiny_dets())
    m = acc.compute().dump()
    assert (m["tp"], m["fp"], m["fn"]) == (2, 4, 3)
    assert (
        m["precision"] == pytest.approx(2 / 6)
        and m["recall"] == pytest.approx(2 / 5)
        and m["f1"] == pytest.approx(4 / 11)
    )
    pc = {c["category_id"]: c for c in m["per_class"]}
    assert (pc[1]["tp"], pc[1]["fp"], pc[1]["fn"]) == (1, 2, 1)
    assert (pc[1]["precision"], pc[1]["recall"], pc[1]["f1"]) == pytest.approx((1 / 3, 1 / 2, 2 / 5))
    assert (pc[2]["tp"], pc[2]["fp"], pc[2]["fn"]) == (1, 1, 1)
    assert (pc[2]["precision"], pc[2]["recall"], pc[2]["f1"]) == pytest.approx((1 / 2, 1 / 2, 1 / 2))
    assert (pc[3]["tp"], pc[3]["fp"], pc[3]["fn"]) == (0, 1, 1)
    assert (pc[3]["precision"], pc[3]["recall"], pc[3]["f1"]) == (0.0, 0.0, 0.0)
    assert acc.per_image_counts() == {
        1: {"tp": 1, "fp": 3, "fn": 2},
        2: {"tp": 1, "fp": 0, "fn": 0},
        3: {"tp": 0, "fp": 0, "fn": 1},
        4: {"tp": 0, "fp": 1, "fn": 0},
    }
    # a lower score threshold lets the detection on B in; a stricter IoU loses D (IoU .75)
    m = accumulate(tiny_gt(), tiny_dets(), score_threshold=0.1).compute().dump()
    assert (m["per_class"][0]["tp"], m["per_class"][0]["fp"], m["per_class"][0]["fn"]) == (2, 2, 0)
    m = accumulate(tiny_gt(), tiny_dets(), iou=0.8).compute().dump()
    assert (m["per_class"][1]["tp"], m["per_class"][1]["fp"], m["per_class"][1]["fn"]) == (0, 2, 2)


def test_tiny_case_with_crowd_agrees_with_pycocotools() -> None:
    gt, dets = tiny_gt(), tiny_dets()
    acc = accumulate(gt, dets)
    ref = pycoco(gt, dets, [1, 2, 3, 4])
    for backend in ("faster-coco-eval", "pycocotools"):
        m = acc.compute(backend).dump()
        for name, r in zip(STAT_NAMES, ref.stats):
            assert same(m[name], math.nan if r == -1 else float(r)), (backend, name)
    per = acc.per_image()
    assert math.isnan(per[4]) and per[3] == 0.0  # no ground truth; ground truth but no detection
    for i in (1, 2):  # (pycocotools' loadRes cannot take image 3's empty result list)
        assert same(per[i], float(pycoco(gt, dets, [i]).stats[0]))


def test_merge_of_two_halves_equals_the_whole(gt30: dict, dets30: dict, acc30: DetectionAccumulator) -> None:
    ids = sorted(dets30)
    first = accumulate(gt30, dets30, ids[::2])
    second = accumulate(gt30, dets30, ids[1::2])
    first.merge(second)
    assert first.images == ids
    whole = acc30.compute().dump()
    merged = first.compute().dump()
    assert json.loads(to_json(merged)) == json.loads(to_json(whole))
    merged_pi, whole_pi = first.per_image(), acc30.per_image()
    assert all(same(merged_pi[i], whole_pi[i], 0.0) for i in ids)
    # and a half on its own is different: the union is evaluated, not an average of the halves
    assert accumulate(gt30, dets30, ids[::2]).compute().dump()["map"] != whole["map"]


def test_merge_refuses_overlap_and_other_ground_truth(gt30: dict, dets30: dict) -> None:
    a = accumulate(gt30, dets30, [1, 2, 3])
    with pytest.raises(ValueError, match="overlap"):
        a.merge(accumulate(gt30, dets30, [3, 4]))
    with pytest.raises(ValueError, match="different ground truth"):
        a.merge(DetectionAccumulator(make_gt(30, seed=5)))
    with pytest.raises(ValueError, match="score_threshold"):
        a.merge(DetectionAccumulator(gt30, score_threshold=0.5))


def test_images_without_detections(gt30: dict) -> None:
    acc = DetectionAccumulator(gt30)
    acc.update([1, 2, 3], [np.zeros((0, 6)), np.empty((0,)), []])
    for backend in ("faster-coco-eval", "pycocotools"):
        m = acc.compute(backend).dump()
        assert m["map"] == 0.0 and m["ar100"] == 0.0 and m["detections"] == 0 and m["images"] == 3
        assert m["precision"] == 0.0 and m["recall"] == 0.0 and m["fp"] == 0 and m["fn"] > 0
    assert set(acc.per_image().values()) == {0.0}


def test_zero_images_is_an_error(gt30: dict) -> None:
    acc = DetectionAccumulator(gt30)
    for call in (acc.compute, acc.per_image, acc.per_image_counts):
        with pytest.raises(ValueError, match="no images"):
            call()


def test_nonfinite_detections_are_dropped_and_counted(gt30: dict, dets30: dict) -> None:
    bad = {i: d.copy() for i, d in dets30.items()}
    bad[1] = np.vstack([bad[1], [[np.nan, 0, 10, 10, 0.9, 1], [0, 0, 10, 10, np.inf, 3]]])
    acc = accumulate(gt30, bad)
    m = acc.compute().dump()
    assert m["nonfinite_detections"] == 2
    assert m["map"] == accumulate(gt30, dets30).compute().dump()["map"]


def test_inverted_boxes_have_zero_size(gt30: dict) -> None:
    a = gt30["annotations"][0]
    x, y, w, h = a["bbox"]
    acc = DetectionAccumulator(gt30)
    acc.update([a["image_id"]], [np.array([[x + w, y + h, x, y, 0.9, a["category_id"]]])])
    m = acc.compute().dump()
    assert m["tp"] == 0 and m["fp"] == 1
    assert same(m["map"], acc.compute("pycocotools").dump()["map"])


@pytest.mark.parametrize(
    "ids, dets, match",
    [
        ([999], [np.zeros((0, 6))], "image 999 is not in the ground truth"),
        ([1, 1], [np.zeros((0, 6))] * 2, "image 1 was already added"),
        ([1], [np.zeros((3, 5))], r"shape \[K, 6\]"),
        ([1], [np.array([[0, 0, 5, 5, 0.5, 2]])], r"category ids \[2.0\] are not in the ground truth"),
        ([1], [np.array([[0, 0, 5, 5, 0.5, 1.5]])], "not in the ground truth"),
        ([1.0], [np.zeros((0, 6))], "image ids must be integers"),
        ([1, 2], [np.zeros((0, 6))], "1 detection arrays for 2 image ids"),
    ],
)
def test_bad_updates_are_rejected(gt30: dict, ids: list, dets: list, match: str) -> None:
    acc = DetectionAccumulator(gt30)
    with pytest.raises(ValueError, match=match):
        acc.update(ids, dets)
    assert acc.images == []


def test_one_call_per_batch_equals_one_call_per_image(gt30: dict, dets30: dict) -> None:
    """`update` checks and converts a whole batch at once; the result must not depend on how the
    images are grouped. Non-finite rows and empty images included; both share one GroundTruth."""
    dets = {i: d.copy() for i, d in dets30.items()}
    first = min(dets)
    dets[first] = np.vstack(
        [dets[first], [[np.nan, 0, 5, 5, 0.9, 1], [0, 0, np.inf, 5, 0.9, 77]]]
    )  # 77: unknown, but not finite
    dets[first + 1] = np.zeros((0, 6))
    truth = GroundTruth(gt30)
    one, batched = DetectionAccumulator(truth), DetectionAccumulator(truth)
    for i, d in dets.items():
        one.update([i], [d])
    ids = list(dets)
    for lo in range(0, len(ids), 7):
        batched.update(ids[lo : lo + 7], [dets[i] for i in ids[lo : lo + 7]])
    assert one.images == batched.images == sorted(ids)
    for i in ids:
        assert np.array_equal(one._dets[i], batched._dets[i])
    a, b = one.compute().dump(), batched.compute().dump()
    assert a["nonfinite_detections"] == b["nonfinite_detections"] == 2
    assert to_json(a) == to_json(b)
    assert to_json(a) == to_json(
        accumulate(gt30, dets).compute().dump()
    )  # a private GroundTruth per accumulator: the same


@pytest.mark.parametrize(
    "ids, dets, match",
    [
        ([1, 2], [[[0, 0, 5, 5, 0.5, 2]], np.zeros((1, 5))], r"image 1: category ids \[2.0\]"),
        ([1, 1], [[[0, 0, 5, 5, 0.5, 2]], np.zeros((0, 6))], r"image 1: category ids \[2.0\]"),
        ([1, 2, 999], [np.zeros((0, 6)), [[0, 0, 5, 5, 0.5, 2]], np.zeros((0, 6))], r"image 2: category ids"),
        (
            [1, 999, 2],
            [np.zeros((0, 6)), np.zeros((0, 6)), [[0, 0, 5, 5, 0.5, 2]]],
            "image 999 is not in the ground truth",
        ),
    ],
)
def test_the_first_bad_image_is_named(gt30: dict, ids: list, dets: list, match: str) -> None:
    """The batch-wise checks report what a check of one image after another would report first."""
    acc = DetectionAccumulator(gt30)
    with pytest.raises(ValueError, match=match):
        acc.update(ids, [np.asarray(d, dtype=float) for d in dets])
    assert acc.images == []


def test_rows_with_infinite_corners_are_dropped_without_warnings(gt30: dict) -> None:
    acc = DetectionAccumulator(gt30)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        acc.update([1], [np.array([[np.inf, 0, np.inf, 5, 0.9, 1], [0, 0, 5, 5, 0.9, 1]])])
    assert acc._dets[1].tolist() == [[0, 0, 5, 5, 0.9, 1]] and acc.compute().dump()["nonfinite_detections"] == 1


def test_empty_updates_add_nothing(gt30: dict) -> None:
    acc = DetectionAccumulator(gt30)
    acc.update([], [])
    assert acc.images == []
    acc.update([1, 2], [np.zeros((0, 6)), np.zeros(0)])  # images without detections
    assert acc.images == [1, 2] and acc._dets[1].shape == acc._dets[2].shape == (0, 6)


def test_a_bad_image_in_a_batch_adds_none_of_it(gt30: dict) -> None:
    acc = DetectionAccumulator(gt30)
    good, bad = np.array([[0, 0, 5, 5, 0.5, 1]]), np.array([[0, 0, 5, 5, 0.5, 2]])
    with pytest.raises(ValueError, match=r"image 2: category ids \[2.0\]"):
        acc.update([1, 2, 3], [good, bad, good])
    assert acc.images == []
    acc.update([1, 3], [good, good])
    assert acc.images == [1, 3]


def test_unknown_backend(acc30: DetectionAccumulator) -> None:
    with pytest.raises(ValueError, match="unknown COCO backend 'mmdet'"):
        acc30.compute("mmdet").dump()


def test_load_coco(tmp_path: Path, gt30: dict) -> None:
    good = tmp_path / "instances_val.json"
    good.write_text(json.dumps(gt30))
    assert load_coco(good) == gt30
    with pytest.raises(ValueError, match=r"missing\.json: cannot read"):
        load_coco(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text('{"images": [')
    with pytest.raises(ValueError, match=r"broken\.json: not valid JSON \(line 1"):
        load_coco(broken)
    no_anns = tmp_path / "no_anns.json"
    no_anns.write_text(json.dumps({"images": [], "categories": []}))
    with pytest.raises(ValueError, match=r"no_anns\.json: missing key 'annotations'"):
        load_coco(no_anns)


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda g: g.pop("categories"), "missing key 'categories'"),
        (lambda g: g.__setitem__("images", {}), "'images' must be a list"),
        (lambda g: g["images"][0].pop("id"), r"images\[0\] has no 'id'"),
        (lambda g: g["images"][1].__setitem__("id", 1), r"images\[1\] repeats id 1"),
        (lambda g: g["images"][0].__setitem__("id", "a"), "must be an integer"),
        (lambda g: g["annotations"][2].pop("bbox"), r"annotations\[2\] has no 'bbox'"),
        (lambda g: g["annotations"][0].__setitem__("bbox", [1, 2, 3]), r"'bbox' must be \[x, y, width, height\]"),
        (lambda g: g["annotations"][0].__setitem__("bbox", [1, 2, -3, 4]), "size >= 0"),
        (lambda g: g["annotations"][0].__setitem__("image_id", 12345), "refers to image 12345"),
        (lambda g: g["annotations"][0].__setitem__("category_id", 7), "refers to category 7"),
        (lambda g: g.__setitem__("categories", []), "'categories' is empty"),
    ],
)
def test_ground_truth_validation(gt30: dict, mutate, match: str) -> None:
    gt = copy.deepcopy(gt30)
    mutate(gt)
    with pytest.raises(ValueError, match=match):
        validate_coco(gt, "val.json")
    with pytest.raises(ValueError, match="ground truth"):
        DetectionAccumulator(gt)


def test_minimal_ground_truth_and_annotation_id_zero(gt30: dict, dets30: dict) -> None:
    # no 'area', 'iscrowd' or 'id' on annotations, ids from 0: defaults are filled, COCO numbers unchanged
    gt = copy.deepcopy(gt30)
    for a in gt["annotations"]:
        del a["area"], a["iscrowd"], a["id"]
    acc = accumulate(gt, dets30)
    full = accumulate(gt30, dets30).compute().dump()
    for backend in ("faster-coco-eval", "pycocotools"):
        m = acc.compute(backend).dump()
        assert all(same(m[k], full[k]) for k in STAT_NAMES)
    assert (
        "ignore" not in gt["annotations"][0] and "ignore" not in gt30["annotations"][0]
    )  # the caller's dict is untouched


def test_results_are_json_serialisable(acc30: DetectionAccumulator) -> None:
    m = acc30.compute().dump()
    json.dumps(m, allow_nan=False)  # every class has ground truth here: no NaN
    json.dumps(acc30.per_image(), allow_nan=False)
    json.dumps(acc30.per_image_counts())
    tiny = accumulate(tiny_gt(), tiny_dets()).compute().dump()
    assert math.isnan(tiny["ap_large"])  # no large object: COCO's -1 is NaN
    json.loads(to_json(tiny))


@pytest.mark.slow
def test_timing_faster_coco_eval_vs_pycocotools() -> None:
    """~500 images; the numbers are printed (run with -s), speed is not asserted."""
    gt = make_gt(500, seed=7)
    dets = make_detections(gt, seed=8)
    acc = accumulate(gt, dets)
    timings = {}
    results = {}
    for backend in ("faster-coco-eval", "pycocotools"):
        t = time.perf_counter()
        results[backend] = acc.compute(backend).dump()
        timings[backend] = time.perf_counter() - t
    t = time.perf_counter()
    acc.per_image()
    timings["per_image"] = time.perf_counter() - t
    for name in STAT_NAMES:
        assert same(results["faster-coco-eval"][name], results["pycocotools"][name])
    n = results["pycocotools"]["detections"]
    print(
        f"\n500 images, {n} detections: compute() faster-coco-eval {timings['faster-coco-eval']:.3f} s, "
        f"pycocotools {timings['pycocotools']:.3f} s ({timings['pycocotools'] / timings['faster-coco-eval']:.1f}x); "
        f"per_image() {timings['per_image']:.3f} s"
    )
