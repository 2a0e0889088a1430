"""A captured candidate in stage e2e (docs/captured.md): the engine's outputs on the kit's validation batches
(`trtverify capture REF --suite S`), read from the capture instead of run, and handed to the task's postprocess and
metrics exactly as a run candidate's outputs are.

Each batch the stage forms is found among the kit's batches by its digest (so the dataset and its preprocessing
must be what they were when the kit was made), and that batch's captured iteration is returned (padded rows
dropped). A capture whose iterations are not the kit's validation batches is refused, naming the file and what is
wrong.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.backends.base import Backend, Capabilities, Feed
from trtverify.config.stages import E2EStage
from trtverify.graph.onnxinfo import TensorMeta, graph_io, load_io
from trtverify.stages.e2e.kitbatches import FOLDER, _id, model_feed
from trtverify.tasks.datasets import Reader
from trtverify.toolout.captures import Capture, inputs_beside, iter_feeds, read_capture
from trtverify.toolout.kit import MANIFEST, feed_digest, feeds_digest, find_kit
from trtverify.util.errors import UsageError
from trtverify.util.words import count


def read_section(manifest: Path) -> dict[str, Any]:
    """The manifest's `e2e` section, checked: each batch's positions, ids, padding and digest, and their digest."""
    try:
        doc = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{manifest}: not a readable kit manifest ({exc})") from None
    sec = doc.get("e2e") if isinstance(doc, dict) else None
    if sec is None:
        raise UsageError(
            f"{manifest}: the kit holds no validation batches: make it with `trtverify capture REFERENCE --suite "
            "SUITE --out KIT` (a suite with stage e2e) and capture its e2e/inputs.json"
        )
    try:
        batches = [{"rows": [int(i) for i in b["rows"]], "ids": list(b["ids"]), "pad": int(b["pad"]),
                    "digest": str(b["digest"])} for b in sec["batches"]]  # fmt: skip
        out = {"input": str(sec["input"]), "batch_size": int(sec["batch_size"]), "rows": int(sec["rows"]),
               "digest": str(sec["digest"]), "batches": batches, "batch_axis": bool(sec["batch_axis"])}  # fmt: skip
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{manifest}: its e2e section is malformed ({type(exc).__name__}: {exc})") from None
    if not batches or feeds_digest([b["digest"] for b in batches]) != out["digest"]:
        raise UsageError(f"{manifest}: its e2e digest does not match its batches' digests (the file was edited)")
    return out


def _shape_problem(got: tuple[int, ...], declared: tuple[object, ...] | None, rows: int, batch: object) -> str:
    """What is wrong with a captured output's shape for a batch of `rows` rows ('' when nothing): its rank, a size
    the model fixes, or its batch axis not of the batch's rows (`batch`: the input's named batch dimension; an
    output whose first dimension has that name holds one row per input row; others, such as the boxes kept by an NMS
    in the graph, are left to the postprocess). A padded batch's rows are counted with the padding."""
    if declared is None:
        return ""
    if len(got) != len(declared):
        return f"{len(declared)} dimensions declared ({list(declared)})"
    fixed = [(k, d) for k, d in enumerate(declared) if isinstance(d, int) and d > 0 and got[k] != d]
    if fixed:
        return f"the model fixes dimension {fixed[0][0]} at {fixed[0][1]}"
    if isinstance(batch, str) and declared and declared[0] == batch and got[0] != rows:
        return f"its batch axis (0) must hold the batch's {rows} rows"
    return ""


class CapturedBatches(Backend):
    """The captured outputs of the kit's validation batches, looked up by the digest of the batch fed."""

    name = "captured"
    capabilities = Capabilities(exposes_intermediates=False, onnx_graph=False, casts_feeds=False)

    def __init__(self, model_path: Path, captured: Path, runner: str | None, cfg: E2EStage, reader: Reader):
        super().__init__()
        self.model_path, self.captured, self.runner = Path(model_path), Path(captured), runner
        self.cfg, self.reader = cfg, reader
        self._cap: Capture | None = None
        self._by_digest: dict[str, int] = {}
        self._pads: list[int] = []
        self._inputs: list[TensorMeta] = []
        self._outputs: list[TensorMeta] = []
        self.ran_as: str | None = None

    def load(self) -> None:
        if self._cap is not None:
            return
        manifest = find_kit(self.captured)
        if manifest is None and self.captured.is_dir():  # KIT/e2e/captured/trtexec/: what e2e/trtexec.sh writes
            manifest = find_kit(self.captured.parent)
        if manifest is None:
            raise UsageError(f"{self.captured}: no capture kit ({MANIFEST}) in its folder or the two above: keep the "
                             "capture of the validation batches in the kit's folder (KIT/e2e/captured/)")  # fmt: skip
        sec = read_section(manifest)
        self._check_batching(manifest, sec)
        cap = read_capture(self.captured, self.runner)
        n = len(sec["batches"])
        if len(cap.iterations) != n:
            raise UsageError(
                f"{cap.describe()}: {count(len(cap.iterations), 'iteration')}, but the kit's validation set "
                f"({manifest}) is {count(n, 'batch')}: capture {manifest.parent / FOLDER / 'inputs.json'} (one "
                "iteration per batch)"
            )
        saved = inputs_beside(self.captured)
        if self.captured.is_file() and saved.is_file():
            fed = [feed_digest(f) for f in iter_feeds(saved)]  # one batch decoded at a time
            digest = feeds_digest(fed)
            if digest != sec["digest"]:
                raise UsageError(
                    f"{self.captured}: made from other inputs than the kit's validation batches: {saved} holds "
                    f"{count(len(fed), 'feed')}, digest {digest[:12]}; the kit's {count(n, 'batch')} have digest "
                    f"{sec['digest'][:12]} ({manifest})"
                )
        self._inputs, self._outputs = graph_io(load_io(self.model_path))
        meta = next((m for m in self._inputs if m.name == sec["input"]), None)
        if meta is None:
            raise UsageError(f"{manifest}: its validation batches feed '{sec['input']}', which is no input of "
                             f"{self.model_path.name}")  # fmt: skip
        batch = meta.shape[0] if sec["batch_axis"] and meta.shape else None
        for i, its in enumerate(cap.iterations):
            missing = [m.name for m in self._outputs if m.name not in its]
            if missing:
                raise UsageError(f"{cap.describe()}: iteration {i} holds no output {', '.join(missing)} of "
                                 f"{self.model_path.name}: was it captured from another model?")  # fmt: skip
            rows = len(sec["batches"][i]["rows"]) + sec["batches"][i]["pad"]
            for m in self._outputs:
                why = _shape_problem(cap.shapes[i].get(m.name, ()), m.shape, rows, batch)
                if why:
                    raise UsageError(f"{cap.describe()}: iteration {i} (batch {i}, {count(rows, 'row')}), output "
                                     f"'{m.name}' has shape {list(cap.shapes[i].get(m.name, ()))}: {why}")  # fmt: skip
        self._by_digest = {}
        for k, b in enumerate(sec["batches"]):
            self._by_digest.setdefault(b["digest"], k)
        self._pads = [b["pad"] for b in sec["batches"]]
        self._manifest = manifest
        self._cap = cap
        self.ran_as = (f"captured elsewhere: {cap.describe()}, the validation batches of kit {manifest}; outputs "
                       "read from the file, nothing run here")  # fmt: skip

    def _check_batching(self, manifest: Path, sec: dict[str, Any]) -> None:
        """The kit's batches must be the ones this stage forms: the same batch size, rows and dataset ids."""
        total = len(self.reader)
        size = sec["batch_size"]
        if sec["rows"] != total:
            raise UsageError(f"{manifest}: its validation batches hold {count(sec['rows'], 'row')}, stages.e2e's "
                             f"dataset {count(total, 'sample')}: make the kit again from this suite")  # fmt: skip
        if size != self.cfg.batch_size:
            raise UsageError(f"{manifest}: its validation batches are of {size} rows, stages.e2e.batch_size is "
                             f"{self.cfg.batch_size}: set batch_size: {size}, or make the kit again")  # fmt: skip
        want = [list(range(i, min(i + size, total))) for i in range(0, total, size)]
        if [b["rows"] for b in sec["batches"]] != want:
            raise UsageError(f"{manifest}: its validation batches are not the dataset's rows in order, "
                             f"{count(size, 'row')} a batch")  # fmt: skip
        ids = [_id(v) for v in self.reader.ids]
        for b in sec["batches"]:
            got = [_id(v) for v in b["ids"]]
            if got != [ids[i] for i in b["rows"]]:
                raise UsageError(f"{manifest}: the dataset's ids of rows {b['rows'][0]}..{b['rows'][-1]} are not the "
                                 "kit's (the dataset changed since the kit was made): make the kit again")  # fmt: skip

    def close(self) -> None:
        self._cap = None

    def inputs(self) -> list[TensorMeta]:
        return list(self._inputs)

    def outputs(self) -> list[TensorMeta]:
        return list(self._outputs)

    def infer(self, feed: Feed) -> dict[str, np.ndarray]:
        if self._cap is None:
            self.load()
        assert self._cap is not None
        (name, x), *more = feed.items()
        meta = next((m for m in self._inputs if m.name == name), None)
        if more or meta is None:
            raise UsageError(f"{self.captured}: fed {', '.join(feed)}; the kit's batches feed one input")
        arr, _ = model_feed(x, meta)  # as the kit fed it: a short batch of a fixed-batch model padded
        digest = feed_digest({name: arr})
        k = self._by_digest.get(digest)
        if k is None:
            raise UsageError(
                f"{self.captured}: a validation batch ({list(arr.shape)} {arr.dtype}, digest {digest[:12]}) is not "
                f"one of the kit's batches ({self._manifest}): the dataset or its preprocessing changed since the kit "
                "was made; make the kit again and capture again"
            )
        tensors = self._cap.iterations[k]
        out = {m.name: np.asarray(tensors[m.name]()) for m in self._outputs}
        if self._pads[k]:  # the padded rows' outputs dropped (outputs with one row per fed row: the padded count)
            fed = len(arr)
            out = {n: a[: fed - self._pads[k]] if a.ndim and len(a) == fed else a for n, a in out.items()}
        return out


__all__ = ["CapturedBatches", "read_section"]
