"""The detection output layouts TensorRT detectors emit, decoded to rows [K, 6] (x1, y1, x2, y2, score, category_id)
in input pixels.

- rows: one output [B, K, 6] (x1, y1, x2, y2, score, class), or one image's [K, 6]; class is a category id unless
  `classes` maps it.
- nms: the four outputs of TensorRT's NMS plugins, in EfficientNMS_TRT / BatchedNMS_TRT order: count [B, 1] (or
  [B]), boxes [B, K, 4] (x1, y1, x2, y2: EfficientNMS writes corners whatever its box_coding), scores [B, K],
  classes [B, K] (int32, or float from BatchedNMS_TRT); the first count rows of each image are valid.
- yolo: the raw head of an export without NMS, [B, 4 + C, N]: rows (cx, cy, w, h) then C class scores for each of
  N candidates (Ultralytics' layout), decoded here with greedy NMS: every (candidate, class) pair with a score
  >= score_threshold, highest score first, drops the later ones of its class (every class with class_agnostic)
  whose IoU with it is >= iou_threshold, EfficientNMS_TRT's rule; at most max_detections per image, and the
  PRE_NMS_TOP highest-scoring pairs at most enter the NMS (Ultralytics' max_nms).
- yolov5: YOLOv5's raw head [B, N, 5 + C]: cx, cy, w, h, objectness, then C class scores per candidate; a pair's
  score is objectness x class score (YOLOv5's non_max_suppression), decoded with the same greedy NMS as yolo.
- mmdeploy: dets [B, K, 5] (x1, y1, x2, y2, score) and labels [B, K], label -1 marking padding (mmdeploy's
  TRTBatchedNMS and its end2end exports).
- torchvision: boxes [K, 4] (x1, y1, x2, y2), scores [K], labels [K] of one image, as torchvision's detection
  models return them (an export of one image; [B, K, 4], [B, K], [B, K] read as B images); labels are category ids
  unless `classes` maps them.
- batch_rows: [N, 7] rows (batch index, x1, y1, x2, y2, class index, score), every image of the batch in one output:
  YOLOv7's end2end export with ONNX's NonMaxSuppression.

Class indices (nms, yolo, yolov5, batch_rows, mmdeploy; rows and torchvision only with `classes`) become category
ids through `classes` (index k -> classes[k]) or, by default, the dataset's category ids in ascending order.
Errors name the model, the output, the shape found and the shape expected.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from trtverify.config.postprocess import KNOWN_NAMES, LAYOUT_ROLES, Postprocess
from trtverify.util.errors import UsageError

PRE_NMS_TOP = 30000
ID_LAYOUTS = ("rows", "torchvision")  # their classes are category ids unless `classes` maps them


def _shape(a: np.ndarray) -> str:
    return "[" + ", ".join(str(d) for d in a.shape) + "]"


class DetectionLayout:
    """Decodes one model's outputs by the suite's `postprocess` (not a hook) against the dataset's categories."""

    def __init__(self, pp: Postprocess, category_ids: Sequence[int]) -> None:
        self.pp = pp
        self.layout = pp.effective_layout()
        self.category_ids = [int(c) for c in category_ids]
        if pp.classes is not None:
            unknown = sorted({c for c in pp.classes if c not in set(self.category_ids)})
            if unknown:
                ids = ", ".join(str(c) for c in self.category_ids[:10]) + (
                    " ..." if len(self.category_ids) > 10 else ""
                )
                raise UsageError(
                    f"postprocess.classes names category ids {unknown} that the dataset does not have (its ids: {ids})"
                )
        self.index_to_id = np.asarray(pp.classes if pp.classes is not None else self.category_ids, dtype=np.float64)

    # -- outputs -------------------------------------------------------------------------
    def _named(self, outputs: dict[str, np.ndarray], model: str) -> list[tuple[str, np.ndarray]]:
        """(name, array) per role of the layout, in role order."""
        roles = LAYOUT_ROLES[self.layout]
        if len(roles) == 1:
            name = self.pp.output or next(iter(outputs))
            if name not in outputs:
                raise UsageError(
                    f"postprocess.output '{name}' is not an output of {model} (outputs: {', '.join(outputs)})"
                )
            return [(name, outputs[name])]
        if self.pp.outputs is not None:
            names = [self.pp.outputs[r] for r in roles]
            missing = [n for n in names if n not in outputs]
            if missing:
                raise UsageError(
                    f"{model}: postprocess.outputs names {', '.join(repr(n) for n in missing)}, not outputs of the "
                    f"model (outputs: {', '.join(outputs)})"
                )
        else:
            names = next((list(k) for k in KNOWN_NAMES[self.layout] if all(n in outputs for n in k)), [])
            if not names and len(outputs) == len(roles):
                names = list(outputs)
            if not names:
                which = ", ".join(f"{r}: NAME" for r in roles)
                raise UsageError(
                    f"{model}: layout {self.layout} reads {len(roles)} outputs ({', '.join(roles)}); the model has "
                    f"{len(outputs)} ({', '.join(outputs)}) and not the usual names: give postprocess.outputs: "
                    f"{{{which}}}"
                )
        return [(n, np.asarray(outputs[n])) for n in names]

    def _wrong(self, model: str, name: str, a: np.ndarray, expected: str, fix: str = "") -> UsageError:
        return UsageError(
            f"{model}: postprocess layout {self.layout}: output '{name}' has shape {_shape(a)}, expected {expected}"
            + (f"; {fix}" if fix else "; name the right output(s), choose another layout, or give a postprocess.hook")
        )

    # -- decoding ------------------------------------------------------------------------
    def decode(
        self, outputs: dict[str, np.ndarray], input_size: tuple[int, int], model: str, batch: int | None = None
    ) -> list[np.ndarray]:
        """One float64 array [K, 6] per image: x1, y1, x2, y2 in input pixels, score, category id (`batch`: the
        images fed, which batch_rows cannot tell)."""
        named = self._named(outputs, model)
        if self.layout in ("rows", "torchvision") and batch not in (None, 1) and np.ndim(named[0][1]) == 2:
            raise UsageError(
                f"{model}: postprocess layout {self.layout}: output '{named[0][0]}' {_shape(named[0][1])} holds one "
                f"image's detections, but {batch} images were fed: set stages.e2e.batch_size: 1"
            )
        if self.layout == "rows":
            rows = self._rows(model, *named[0])
        elif self.layout == "nms":
            rows = self._nms(model, named)
        elif self.layout == "mmdeploy":
            rows = self._mmdeploy(model, named)
        elif self.layout == "torchvision":
            rows = self._torchvision(model, named)
        elif self.layout == "batch_rows":
            rows = self._batch_rows(model, *named[0], batch)
        else:
            rows = self._yolo(model, *named[0])
        if self.pp.normalized:
            h, w = input_size
            scale = np.array([w, h, w, h], dtype=np.float64)
            for r in rows:
                r[:, :4] *= scale
        if self.layout not in ID_LAYOUTS or self.pp.classes is not None:
            name = named[-1][0] if len(named) > 1 else named[0][0]
            for r in rows:
                r[:, 5] = self._category(r[:, 5], model, name)
        return rows

    def _category(self, index: np.ndarray, model: str, name: str) -> np.ndarray:
        finite = np.isfinite(index)
        k = np.where(finite, index, 0)
        bad = finite & ((k != np.round(k)) | (k < 0) | (k >= len(self.index_to_id)))
        if bad.any():
            n = len(self.index_to_id)
            source = "postprocess.classes maps" if self.pp.classes is not None else "the dataset's categories map"
            raise UsageError(
                f"{model}: output '{name}' holds class index {index[bad][0]:g}, but {source} only indices 0..{n - 1}; "
                "give postprocess.classes: the category id of each class index"
            )
        return np.where(finite, self.index_to_id[k.astype(np.int64)], np.nan)

    def _rows(self, model: str, name: str, a: np.ndarray) -> list[np.ndarray]:
        if a.ndim not in (2, 3) or a.shape[-1] != 6:
            raise self._wrong(model, name, a, "[B, K, 6] or one image's [K, 6] (x1, y1, x2, y2, score, class)")
        if a.ndim == 2:
            return [a.astype(np.float64)]
        return [a[b].astype(np.float64) for b in range(a.shape[0])]

    def _torchvision(self, model: str, named: list[tuple[str, np.ndarray]]) -> list[np.ndarray]:
        (nb, boxes), (ns, scores), (nl, labels) = named
        if boxes.ndim not in (2, 3) or boxes.shape[-1] != 4:
            raise self._wrong(model, nb, boxes, "[K, 4] (x1, y1, x2, y2 of one image) or [B, K, 4]")
        lead = boxes.shape[:-1]
        for n, a in ((ns, scores), (nl, labels)):
            if a.shape != lead:
                raise self._wrong(model, n, a, f"{list(lead)} (as {nb} {list(boxes.shape)} gives K)")
        per = [(boxes, scores, labels)] if boxes.ndim == 2 else list(zip(boxes, scores, labels))
        out = []
        for b, sc, lab in per:
            rows = np.empty((len(sc), 6), dtype=np.float64)
            rows[:, :4], rows[:, 4], rows[:, 5] = b, sc, lab
            out.append(rows)
        return out

    def _batch_rows(self, model: str, name: str, a: np.ndarray, batch: int | None) -> list[np.ndarray]:
        if a.ndim != 2 or a.shape[-1] != 7:
            raise self._wrong(model, name, a, "[N, 7] (batch index, x1, y1, x2, y2, class, score)")
        index = a[:, 0].astype(np.float64)
        n = batch if batch is not None else (int(index.max()) + 1 if len(index) else 1)
        bad = (index != np.round(index)) | (index < 0) | (index >= n)
        if bad.any():
            raise UsageError(
                f"{model}: postprocess layout batch_rows: output '{name}' has a row of batch index {index[bad][0]:g} "
                f"in a batch of {n} images; is column 0 the batch index (batch_rows: batch index, x1, y1, x2, y2, "
                "class, score)?"
            )
        out = []
        for i in range(n):
            r = a[index == i].astype(np.float64)
            out.append(np.stack([r[:, 1], r[:, 2], r[:, 3], r[:, 4], r[:, 6], r[:, 5]], axis=1))
        return out

    def _nms(self, model: str, named: list[tuple[str, np.ndarray]]) -> list[np.ndarray]:
        (nc, count), (nb, boxes), (ns, scores), (nk, classes) = named
        if boxes.ndim != 3 or boxes.shape[-1] != 4:
            raise self._wrong(model, nb, boxes, "[B, K, 4] (x1, y1, x2, y2)")
        b, k = boxes.shape[:2]
        if count.shape not in ((b, 1), (b,)):
            raise self._wrong(model, nc, count, f"[{b}, 1] (detections per image, as {nb} [{b}, {k}, 4] gives B)")
        for n, a in ((ns, scores), (nk, classes)):
            if a.shape != (b, k):
                raise self._wrong(model, n, a, f"[{b}, {k}] (as {nb} [{b}, {k}, 4] gives B and K)")
        counts = count.reshape(b)
        if not np.all((counts >= 0) & (counts <= k)):
            bad = counts[(counts < 0) | (counts > k)][0]
            raise UsageError(
                f"{model}: postprocess layout nms: output '{nc}' says {bad} detections, but '{nb}' holds {k} per "
                f"image; is '{nc}' the count output? (postprocess.outputs names each)"
            )
        out = []
        for i in range(b):
            n = int(counts[i])
            rows = np.empty((n, 6), dtype=np.float64)
            rows[:, :4] = boxes[i, :n]
            rows[:, 4] = scores[i, :n]
            rows[:, 5] = classes[i, :n]
            out.append(rows)
        return out

    def _mmdeploy(self, model: str, named: list[tuple[str, np.ndarray]]) -> list[np.ndarray]:
        (nd, dets), (nl, labels) = named
        if dets.ndim != 3 or dets.shape[-1] != 5:
            raise self._wrong(model, nd, dets, "[B, K, 5] (x1, y1, x2, y2, score)")
        if labels.shape != dets.shape[:2]:
            raise self._wrong(model, nl, labels, f"[{dets.shape[0]}, {dets.shape[1]}] (as {nd} gives B and K)")
        out = []
        for i in range(dets.shape[0]):
            keep = labels[i] >= 0  # -1: padding
            rows = np.empty((int(keep.sum()), 6), dtype=np.float64)
            rows[:, :5] = dets[i][keep]
            rows[:, 5] = labels[i][keep]
            out.append(rows)
        return out

    def _yolo(self, model: str, name: str, a: np.ndarray) -> list[np.ndarray]:
        c = len(self.index_to_id)
        source = "postprocess.classes" if self.pp.classes is not None else "the dataset's categories"
        if self.layout == "yolov5":
            if a.ndim != 3 or a.shape[2] != 5 + c:
                hint = ""
                if a.ndim == 3 and a.shape[2] > 5:
                    hint = (f"the head has {a.shape[2] - 5} classes, {source} give {c}: give postprocess.classes, "
                            "one category id per class index")  # fmt: skip
                raise self._wrong(model, name, a, f"[B, N, {5 + c}] (cx, cy, w, h, objectness, then {c} class "
                                  f"scores from {source})", hint)  # fmt: skip
            heads = [np.concatenate([h[:, :4], h[:, 5:] * h[:, 4:5]], axis=1).T for h in a.astype(np.float64)]
            return [self._nms_head(h) for h in heads]
        if a.ndim != 3 or a.shape[1] != 4 + c:
            hint = ""
            if a.ndim == 3 and a.shape[2] == 5 + c:
                hint = "it looks like YOLOv5's [B, N, 5 + C] (objectness, then classes): use postprocess layout yolov5"
            elif a.ndim == 3 and a.shape[2] == 4 + c:
                hint = (
                    "it looks like [B, N, 4 + C] (candidates first): export the head as [B, 4 + C, N] or decode "
                    "it with a postprocess.hook"
                )
            elif a.ndim == 3 and a.shape[1] > 4:
                hint = (
                    f"the head has {a.shape[1] - 4} classes, {source} give {c}: give postprocess.classes, one "
                    "category id per class index"
                )
            raise self._wrong(model, name, a, f"[B, {4 + c}, N] (cx, cy, w, h, then {c} class scores from {source})",
                              hint)  # fmt: skip
        return [self._nms_head(a[i].astype(np.float64)) for i in range(a.shape[0])]

    def _nms_head(self, head: np.ndarray) -> np.ndarray:
        """One image's raw head [4 + C, N] (cx, cy, w, h, then the class scores) through the NMS settings."""
        pp = self.pp
        cx, cy, w, h = head[:4]
        boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
        return greedy_nms(
            boxes,
            head[4:].T,
            score_threshold=float(pp.nms_setting("score_threshold")),
            iou_threshold=float(pp.nms_setting("iou_threshold")),
            max_detections=int(pp.nms_setting("max_detections")),
            class_agnostic=bool(pp.nms_setting("class_agnostic")),
        )


def greedy_nms(
    boxes: np.ndarray,
    scores: np.ndarray,
    *,
    score_threshold: float,
    iou_threshold: float,
    max_detections: int,
    class_agnostic: bool = False,
) -> np.ndarray:
    """Class-wise greedy NMS of one image: boxes [N, 4] (x1, y1, x2, y2), scores [N, C] -> rows [K, 6] (x1, y1, x2,
    y2, score, class index), highest score first (ties: candidate, then class order), K <= max_detections.

    Every (candidate, class) pair scoring >= score_threshold enters, the PRE_NMS_TOP best at most; a kept pair drops
    the later pairs of its class (of any class when class_agnostic) whose IoU with it is >= iou_threshold. IoU of
    boxes with an empty union is 0."""
    anchor, cls = np.nonzero(scores >= score_threshold)  # candidate-major, as TensorRT's plugins index them
    s = scores[anchor, cls]
    order = np.argsort(-s, kind="stable")[:PRE_NMS_TOP]
    anchor, cls, s = anchor[order], cls[order], s[order]
    b = boxes[anchor]
    x1, y1 = np.minimum(b[:, 0], b[:, 2]), np.minimum(b[:, 1], b[:, 3])
    x2, y2 = np.maximum(b[:, 0], b[:, 2]), np.maximum(b[:, 1], b[:, 3])
    area = (x2 - x1) * (y2 - y1)
    alive = np.ones(len(s), dtype=bool)
    kept: list[int] = []
    for i in range(len(s)):
        if not alive[i]:
            continue
        kept.append(i)
        if len(kept) == max_detections:
            break
        j = slice(i + 1, None)
        iw = np.clip(np.minimum(x2[i], x2[j]) - np.maximum(x1[i], x1[j]), 0, None)
        ih = np.clip(np.minimum(y2[i], y2[j]) - np.maximum(y1[i], y1[j]), 0, None)
        inter = iw * ih
        union = area[i] + area[j] - inter
        with np.errstate(divide="ignore", invalid="ignore"):
            iou = np.where((inter > 0) & (union > 0), inter / union, 0.0)
        hit = iou >= iou_threshold
        if not class_agnostic:
            hit &= cls[j] == cls[i]
        alive[j] &= ~hit
    sel = np.asarray(kept, dtype=np.int64)
    rows = np.empty((len(sel), 6), dtype=np.float64)
    rows[:, :4] = b[sel]
    rows[:, 4] = s[sel]
    rows[:, 5] = cls[sel]
    return rows
