"""Which tensors of a graph hold detections, and how they group: the layouts TensorRT detectors emit.

Recognised, in this order (a tensor belongs to one layout at most; anything ambiguous stays a tensor):

1. the outputs of an NMS plugin node, by its op type (whatever its domain) and output slot:
   `EfficientNMS_TRT`, `BatchedNMS_TRT`, `BatchedNMSDynamic_TRT` -> `nms4` (count [B, 1], boxes [B, K, 4], scores
   [B, K], classes [B, K]); mmdeploy's `TRTBatchedNMS` -> `dets5` (dets [B, K, 5] = x1, y1, x2, y2, score; labels
   [B, K]);
2. graph outputs by shape, type and name:
   - `det6`: one float tensor [B, K, 6] or [K, 6] (x1, y1, x2, y2, score, class) whose class column holds whole
     numbers (in the reference's first sample; a raw head of two classes, [B, N, 4 + 2], holds probabilities there);
   - `dets5`: a float [B, K, 5] and the one integer [B, K] beside it (mmdeploy's `dets`, `labels`);
   - `nms4`: a float [B, K, 4] (boxes) with [B, K] scores (float) and classes (integer; or float with whole numbers
     and a class-like name: class, label, cls, categor), and a count: the one integer [B, 1] or [B] output of the
     same B (or, where there are several, the one named like num/count). Without a count the boxes' name must say
     so (box, bbox, det), and padding is read from the scores and classes;
   - `torchvision`: torchvision's detection outputs, unbatched: a float [K, 4] (boxes) with a float [K] (scores) and
     an integer [K] (labels; or float with whole numbers and a class-like name), as `torchvision.models.detection`
     models return them for one image (boxes, scores, labels);
   - `batch7`: one float tensor [N, 7] (batch index, x1, y1, x2, y2, class, score), made by a Concat, whose batch
     index and class columns hold whole numbers >= 0 (in the reference's first sample): YOLOv7's end2end export
     with ONNX's NonMaxSuppression, every image's rows in one tensor.

Padding: a layout with a count has `count[b]` valid rows in image b; one without has its rows of score <= 0
or class < 0 left out (`trtverify.compare.detections.valid_rows`). Boxes are corners (EfficientNMS_TRT writes
corners whatever its `box_coding`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from trtverify.compare.detections import Boxes, DetectionError, valid_rows

NMS4_PLUGINS = ("EfficientNMS_TRT", "BatchedNMS_TRT", "BatchedNMSDynamic_TRT")  # count, boxes, scores, classes
DETS5_PLUGINS = ("TRTBatchedNMS",)  # dets, labels
ROLES = {
    "nms4": ("count", "boxes", "scores", "classes"),
    "dets5": ("dets", "labels"),
    "det6": ("detections",),
    "torchvision": ("boxes", "scores", "labels"),
    "batch7": ("detections",),
}
CLASS_NAME = re.compile(r"class|label|cls|categor", re.I)
SCORE_NAME = re.compile(r"score|conf|prob", re.I)
COUNT_NAME = re.compile(r"num|count", re.I)
BOX_NAME = re.compile(r"box|bbox|det", re.I)


@dataclass(frozen=True)
class TensorInfo:
    """What recognition reads of one tensor: its reference shape and dtype, its producer and whether the graph
    outputs it."""

    name: str
    shape: tuple[int, ...]
    dtype: str  # numpy dtype name
    op_type: str | None = None  # of the node producing it
    node: str | None = None
    slot: int = 0  # its position among that node's outputs
    output: bool = True

    @property
    def floating(self) -> bool:
        return np.dtype(self.dtype).kind == "f"

    @property
    def integer(self) -> bool:
        return np.dtype(self.dtype).kind in "iu"


@dataclass(frozen=True)
class Layout:
    """A group of tensors holding detections: `kind` (nms4, dets5, det6), role -> tensor, and how it was found."""

    kind: str
    roles: dict[str, str | None]
    source: str

    @property
    def tensors(self) -> list[str]:
        return [t for r in ROLES[self.kind] if (t := self.roles.get(r)) is not None]


def _whole(values: np.ndarray) -> bool:
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    v = v[np.isfinite(v)]
    return bool(np.all(v == np.rint(v)))


def _plugins(tensors: Sequence[TensorInfo]) -> list[Layout]:
    by_node: dict[str, dict[int, TensorInfo]] = {}
    for t in tensors:
        if t.op_type in NMS4_PLUGINS + DETS5_PLUGINS and t.node is not None:
            by_node.setdefault(t.node, {})[t.slot] = t
    out = []
    for node, slots in by_node.items():
        op = next(iter(slots.values())).op_type
        kind = "nms4" if op in NMS4_PLUGINS else "dets5"
        roles = ROLES[kind]
        if any(i not in slots for i in range(len(roles))):
            continue  # an output not computed (or not a value): the others stay tensors
        got = {r: slots[i] for i, r in enumerate(roles)}
        if kind == "nms4":
            b, k = got["boxes"].shape[:1], got["boxes"].shape[1:2]
            fits = got["boxes"].shape[2:] == (4,) and got["scores"].shape == b + k and got["classes"].shape == b + k
        else:
            fits = len(got["dets"].shape) == 3 and got["dets"].shape[2] == 5 and got["labels"].shape == got[
                "dets"
            ].shape[:2]  # fmt: skip
        if fits:
            out.append(Layout(kind, {r: t.name for r, t in got.items()}, f"outputs of {op} node {node}"))
    return out


def _det6(t: TensorInfo, first: Callable[[str], np.ndarray | None]) -> bool:
    if not t.floating or len(t.shape) not in (2, 3) or t.shape[-1] != 6:
        return False
    value = first(t.name)
    if value is None:
        return False
    rows = np.asarray(value, dtype=np.float64).reshape(-1, 6)
    return _whole(rows[rows[:, 4] > 0, 5])  # the class column of the valid rows


def _batch7(t: TensorInfo, first: Callable[[str], np.ndarray | None]) -> bool:
    if not t.floating or len(t.shape) != 2 or t.shape[1] != 7 or t.op_type not in (None, "Concat"):
        return False  # YOLOv7 concatenates batch index, box, class and score (a 7-class softmax is no detection)
    value = first(t.name)
    if value is None:
        return False
    rows = np.asarray(value, dtype=np.float64).reshape(-1, 7)
    return _whole(rows[:, [0, 5]]) and bool(np.all(rows[:, [0, 5]] >= 0))


def _nms4(boxes: TensorInfo, free: list[TensorInfo], first: Callable[[str], np.ndarray | None]) -> Layout | None:
    """The four-output layout around `boxes` [B, K, 4] (or torchvision's three outputs around boxes [K, 4])."""
    lead = boxes.shape[:-1]
    same = [t for t in free if t.shape == lead]
    ints = [t for t in same if t.integer]
    floats = [t for t in same if t.floating]
    if len(ints) == 1 and len(floats) == 1:
        classes, scores = ints[0], floats[0]
    elif not ints and len(floats) == 2:
        named = [t for t in floats if CLASS_NAME.search(t.name) and not SCORE_NAME.search(t.name)]
        if len(named) != 1:
            return None
        classes = named[0]
        scores = next(t for t in floats if t is not classes)
        value = first(classes.name)
        if value is None or not _whole(value):
            return None
    else:
        return None
    if len(lead) == 1:
        roles = {"boxes": boxes.name, "scores": scores.name, "labels": classes.name}
        return Layout("torchvision", roles, "graph outputs, by shape and type (torchvision's boxes, scores, labels)")
    b = lead[0]
    counts = [t for t in free if t.integer and t.shape in ((b, 1), (b,))]
    if len(counts) > 1:
        counts = [t for t in counts if COUNT_NAME.search(t.name)]
        if len(counts) != 1:
            return None
    count = counts[0].name if counts else None
    if count is None and not BOX_NAME.search(boxes.name):
        return None
    roles = {"count": count, "boxes": boxes.name, "scores": scores.name, "classes": classes.name}
    return Layout("nms4", roles, "graph outputs, by shape, type and name")


def recognise(tensors: Sequence[TensorInfo], first: Callable[[str], np.ndarray | None]) -> list[Layout]:
    """The detection layouts among `tensors` (the reference's, with shapes of its first sample; `first(name)`: that
    sample's value, or None), in the order of their first tensor."""
    found = _plugins(tensors)
    used = {n for lay in found for n in lay.tensors}
    free = [t for t in tensors if t.output and t.name not in used]
    for t in free:
        if _det6(t, first):
            found.append(Layout("det6", {"detections": t.name}, "graph output, by shape and class column"))
        elif _batch7(t, first):
            src = "graph output, by shape and its batch index and class columns"
            found.append(Layout("batch7", {"detections": t.name}, src))
    used = {n for lay in found for n in lay.tensors}
    free = [t for t in free if t.name not in used]
    fives = [t for t in free if t.floating and len(t.shape) == 3 and t.shape[2] == 5]
    for d in fives:
        labels = [t for t in free if t.integer and t.shape == d.shape[:2]]
        if len(labels) == 1 and sum(f.shape[:2] == d.shape[:2] for f in fives) == 1:
            roles: dict[str, str | None] = {"dets": d.name, "labels": labels[0].name}
            found.append(Layout("dets5", roles, "graph outputs, by shape and type"))
    used = {n for lay in found for n in lay.tensors}
    free = [t for t in free if t.name not in used]
    boxes = [t for t in free if t.floating and len(t.shape) in (2, 3) and t.shape[-1] == 4]
    for bx in boxes:
        if sum(o.shape[:-1] == bx.shape[:-1] for o in boxes) != 1:
            continue  # two box tensors of one size: which scores go with which is a guess
        lay = _nms4(bx, [t for t in free if t is not bx], first)
        if lay is not None and not set(lay.tensors) & {n for x in found for n in x.tensors}:
            found.append(lay)
    order = {t.name: i for i, t in enumerate(tensors)}
    return sorted(found, key=lambda lay: min(order[n] for n in lay.tensors))


def _rows(a: np.ndarray, dims: int, name: str) -> np.ndarray:
    a = np.asarray(a)
    if a.ndim != dims:
        raise DetectionError(f"{name}: shape {list(a.shape)}, expected {dims} dimensions")
    return a


def paired_images(
    ref: Layout, ref_arrays: Mapping[str, np.ndarray], cand: Layout, cand_arrays: Mapping[str, np.ndarray]
) -> tuple[list[Boxes], list[Boxes]]:
    """Both sides' images of one sample. A batch7 tensor says no batch size: the images past the last one either
    side has detections in are empty on the other."""
    a, b = images(ref, ref_arrays), images(cand, cand_arrays)
    if ref.kind == "batch7":
        n = max(len(a), len(b))
        empty = Boxes.of(np.zeros((0, 4)), np.zeros(0), np.zeros(0))
        a, b = a + [empty] * (n - len(a)), b + [empty] * (n - len(b))
    return a, b


def _batch7_images(d: np.ndarray, name: str) -> list[Boxes]:
    d = np.asarray(d)
    if d.ndim != 2 or d.shape[-1] != 7:
        raise DetectionError(f"{name}: shape {list(d.shape)}, expected [N, 7]")
    index = np.asarray(d[:, 0], dtype=np.float64)
    bad = ~np.isfinite(index) | (index < 0) | (index != np.rint(index))
    if bad.any():
        raise DetectionError(f"{name}: batch index {index[bad][0]:g} is not an image index")
    ids = index.astype(np.int64)
    out = []
    for i in range(int(ids.max()) + 1 if ids.size else 0):
        rows = d[ids == i]
        keep = valid_rows(rows[:, 6], rows[:, 5])
        out.append(Boxes.of(rows[keep, 1:5], rows[keep, 6], rows[keep, 5]))
    return out


def images(layout: Layout, arrays: Mapping[str, np.ndarray]) -> list[Boxes]:
    """The valid detections of each image of one sample, read from `arrays` (tensor name -> value)."""
    r = layout.roles
    if layout.kind == "batch7":
        return _batch7_images(arrays[r["detections"]], r["detections"])  # type: ignore[index]
    if layout.kind == "torchvision":
        r = {"count": None, "boxes": r["boxes"], "scores": r["scores"], "classes": r["labels"]}
        if np.ndim(arrays[r["boxes"]]) == 2:  # type: ignore[index]  # one image
            arrays = {t: np.asarray(arrays[t])[None] for t in r.values() if t is not None}
    if layout.kind == "det6":
        d = np.asarray(arrays[r["detections"]])  # type: ignore[index]
        if d.ndim not in (2, 3) or d.shape[-1] != 6:
            raise DetectionError(f"{r['detections']}: shape {list(d.shape)}, expected [B, K, 6] or [K, 6]")
        per = d.reshape((1,) + d.shape) if d.ndim == 2 else d
        out = []
        for img in per:
            keep = valid_rows(img[:, 4])
            out.append(Boxes.of(img[keep, :4], img[keep, 4], img[keep, 5]))
        return out
    if layout.kind == "dets5":
        dets = _rows(arrays[r["dets"]], 3, r["dets"])  # type: ignore[index]
        labels = _rows(arrays[r["labels"]], 2, r["labels"])  # type: ignore[index]
        if dets.shape[-1] != 5 or labels.shape != dets.shape[:2]:
            raise DetectionError(f"dets {list(dets.shape)} and labels {list(labels.shape)} do not pair")
        out = []
        for d, lab in zip(dets, labels):
            keep = valid_rows(d[:, 4], lab)
            out.append(Boxes.of(d[keep, :4], d[keep, 4], lab[keep]))
        return out
    boxes = _rows(arrays[r["boxes"]], 3, r["boxes"])  # type: ignore[index]
    scores = _rows(arrays[r["scores"]], 2, r["scores"])  # type: ignore[index]
    classes = _rows(arrays[r["classes"]], 2, r["classes"])  # type: ignore[index]
    if boxes.shape[-1] != 4 or scores.shape != boxes.shape[:2] or classes.shape != scores.shape:
        raise DetectionError(
            f"boxes {list(boxes.shape)}, scores {list(scores.shape)} and classes {list(classes.shape)} do not pair"
        )
    counts = None
    if r.get("count") is not None:
        counts = np.asarray(arrays[r["count"]]).reshape(-1)  # type: ignore[index]
        if counts.shape[0] != boxes.shape[0]:
            raise DetectionError(f"{counts.shape[0]} counts for {boxes.shape[0]} images")
    out = []
    for i in range(boxes.shape[0]):
        if counts is not None:
            c = float(counts[i])
            keep = np.arange(int(min(max(c, 0), boxes.shape[1])) if np.isfinite(c) else 0)
        else:
            keep = valid_rows(scores[i], classes[i])
        out.append(Boxes.of(boxes[i, keep], scores[i, keep], classes[i, keep]))
    return out
