"""A candidate captured on another machine (docs/captured.md): its "run" returns the tensors a capture file holds
for the feed whose digest the capture kit recorded, so the layerwise stage compares them like any candidate's.

Nothing is run here, so nothing can be re-run: root causes are ranked from the captured tensors alone (amplification),
and a feed that is not one of the kit's is refused.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from trtverify.backends.base import Backend, Capabilities, Feed
from trtverify.graph.onnxgraph import GraphIndex
from trtverify.graph.onnxinfo import TensorMeta, graph_io, load_io, load_onnx
from trtverify.toolout.captures import ONE_FEED, Capture, inputs_beside, read_capture, read_feeds
from trtverify.toolout.debugtensors import TensorStats
from trtverify.toolout.kit import MANIFEST, Kit, feed_digest, feeds_digest, find_kit, read_kit
from trtverify.toolout.layermap import LAYER_INFO, onnx_names, read_layer_map
from trtverify.util.errors import BackendError, UsageError
from trtverify.util.words import count


def _shapes(feeds: Sequence[Feed]) -> str:
    first = feeds[0] if feeds else {}
    return ", ".join(f"{n} {'x'.join(map(str, a.shape))} {a.dtype}" for n, a in sorted(first.items()))


def _clashes(got: tuple[int, ...], declared: tuple[object, ...]) -> bool:
    if len(got) != len(declared):
        return True
    return any(isinstance(d, int) and d > 0 and d != g for g, d in zip(got, declared))


def _e2e_hint(manifest: Path, iterations: int) -> str:
    """Where a capture has as many iterations as the kit has validation batches: it is stage e2e's."""
    try:
        batches = json.loads(manifest.read_text(encoding="utf-8"))["e2e"]["batches"]
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    if not isinstance(batches, list) or len(batches) != iterations:
        return ""
    return " (it has the kit's validation batches: a candidate of stage e2e; list it in stages.e2e.candidates only)"


def _one_feed_hint(cap: Capture, kit: Kit) -> str:
    """A tool that runs one feed (trtexec, a KServe request) against a kit of several: the kit's README says how."""
    why = ONE_FEED.get(cap.kind)
    if len(cap.iterations) != 1 or why is None:
        return ""
    return f" ({why}: make a kit of one feed, `trtverify capture {kit.reference} --samples 1`, and capture again)"


class CapturedBackend(Backend):
    name = "captured"
    capabilities = Capabilities(exposes_intermediates=True, onnx_graph=False, casts_feeds=False)
    unexposed = "not captured (not marked, or fused away where it ran)"

    def __init__(
        self,
        model_path: Path,
        captured: Path,
        runner: str | None = None,
        iteration: int | None = None,
        feeds: Sequence[Feed] = (),
        layerinfo: Path | None = None,
    ):
        super().__init__()
        self.model_path = Path(model_path)
        self.captured = Path(captured)
        self.runner = runner
        self.iteration = iteration
        self.layerinfo = layerinfo
        self._only: str | None = None  # with `iteration`: the digest of the one feed compared
        self._feeds = list(feeds)
        self._capture: Capture | None = None
        self._kit: Kit | None = None
        self._inputs: list[TensorMeta] = []
        self._outputs: list[TensorMeta] = []
        self._exposed: list[str] = []
        self.ran_as: str | None = None

    @classmethod
    def from_capture(
        cls,
        model_path: Path,
        captured: Path,
        runner: str | None,
        iteration: int | None,
        layerinfo: Path | None,
        samples: Sequence[Feed],
    ) -> Backend:
        return cls(model_path, captured, runner, iteration, samples, layerinfo)

    def load(self) -> None:
        if self._capture is not None:
            return
        manifest = find_kit(self.captured)
        if manifest is None:
            raise UsageError(
                f"{self.captured}: no capture kit ({MANIFEST}) in its folder or the one above: a capture is compared "
                "only with the feeds it was made from; make them with `trtverify capture` and keep the capture in the "
                "kit's folder"
            )
        kit = read_kit(manifest)
        graph = GraphIndex.from_model(load_onnx(self.model_path))
        inputs, outputs = graph_io(load_io(self.model_path))
        known = set(graph.producers) | {m.name for m in inputs}
        cap = read_capture(self.captured, self.runner, known)
        mapped = named_by_layers(cap, self.layerinfo or kit.folder / LAYER_INFO, graph, known, self.layerinfo is None)
        first_only = ""
        if self.iteration is None and len(cap.iterations) == 1 < len(kit.sample_digests) and cap.kind in ONE_FEED:
            self.iteration = 0  # trtexec runs one feed, the kit's feed 0 (its trtexec/*.bin); a KServe response one
            first_only = f"; one feed captured ({cap.kind}): compared on the kit's feed 0, its other feeds not compared"
        if len(cap.iterations) not in (len(kit.sample_digests), kit.iterations()) and not first_only:
            extra = f" and {count(len(kit.consistency), 'consistency feed')}" if kit.consistency else ""
            raise UsageError(
                f"{cap.describe()}: {count(len(cap.iterations), 'iteration')}, but its kit {manifest} holds "
                f"{count(len(kit.sample_digests), 'feed')}{extra}"
                + _e2e_hint(manifest, len(cap.iterations))
                + _one_feed_hint(cap, kit)
            )
        if cap.run is not None and cap.run.kit_digest not in (kit.digest, kit.capture_digest):  # what the runner fed
            raise UsageError(
                f"{self.captured}: made from other inputs than its kit's: {cap.run.path} records digest "
                f"{cap.run.kit_digest[:12]}, the kit ({manifest}) {kit.describe()}: run run_engine.py again in this kit"
            )
        only = ""
        if self.iteration is not None:
            if self.iteration >= len(cap.iterations):
                raise UsageError(f"{cap.describe()}: no iteration {self.iteration} (iterations 0 to "
                                 f"{len(cap.iterations) - 1})")  # fmt: skip
            if self.iteration >= len(kit.sample_digests):  # a consistency feed: no reference values for it
                role = kit.consistency[self.iteration - len(kit.sample_digests)]["role"].replace("_", " ")
                n = len(kit.sample_digests)
                feeds = "iteration 0" if n == 1 else f"iterations 0 to {n - 1}"
                raise UsageError(f"{cap.describe()}: iteration {self.iteration} is a consistency feed of the kit "
                                 f"({role}), checked against the capture's own iterations, not the reference: the "
                                 f"kit's feeds are {feeds}")  # fmt: skip
            self._only = kit.sample_digests[self.iteration]
            if not first_only:
                only = f"; iteration {self.iteration} only, on the kit's feed {self.iteration}: others not compared"
        saved = inputs_beside(self.captured)
        if self.captured.is_file() and saved.is_file():  # the inputs the target's tool fed, saved with the capture
            fed = read_feeds(saved)
            digest = feeds_digest([feed_digest(f) for f in fed])
            if digest not in (kit.digest, kit.capture_digest):
                raise UsageError(
                    f"{self.captured}: made from other inputs than its kit's: {saved} holds "
                    f"{count(len(fed), 'feed')} of {_shapes(fed)}, digest {digest[:12]}; the kit ({manifest}) "
                    f"{kit.describe()}: capture again with --load-inputs {kit.folder / 'inputs.json'}"
                )
        if self._feeds:
            digests = [feed_digest(f) for f in self._feeds]
            if feeds_digest(digests) != kit.digest:
                raise UsageError(
                    f"{self.captured}: captured from the kit's feeds ({manifest}: {kit.describe()}), but this run "
                    f"feeds {count(len(digests), 'feed')} of {_shapes(self._feeds)}, digest "
                    f"{feeds_digest(digests)[:12]}: compare with the kit's inputs ({kit.inputs_file}), or capture "
                    "again from a kit of these inputs"
                )
        names = cap.names() + cap.stat_names()
        if not known & set(names):
            raise UsageError(
                f"{cap.describe()}: none of its {count(len(names), 'tensor')} ({', '.join(names[:3])}"
                f"{', ...' if len(names) > 3 else ''}) is a tensor of {self.model_path.name}: captured from another "
                "model?"
            )
        for i, shapes in enumerate(cap.shapes):  # a graph output's declared sizes (the fixed ones) hold in the capture
            for m in outputs:
                got = shapes.get(m.name)
                if got is not None and m.shape is not None and _clashes(got, m.shape):
                    raise UsageError(
                        f"{cap.describe()}: iteration {i}, output '{m.name}' has shape {list(got)}, but "
                        f"{self.model_path.name} declares {list(m.shape)}"
                    )
        self._inputs, self._outputs = inputs, outputs
        self._capture, self._kit = cap, kit
        self.ran_as = (
            f"captured elsewhere: {cap.describe()}, kit {manifest}; tensors read from the file, nothing run here, so "
            "root causes are ranked by the error each layer adds (isolation re-runs the candidate: skipped)"
            + only
            + first_only
            + mapped
        )

    def close(self) -> None:
        self._capture = None

    @property
    def capture(self) -> Capture:
        """The capture read (the consistency checks read its further iterations)."""
        return self._cap()

    @property
    def kit(self) -> Kit:
        self._cap()
        assert self._kit is not None
        return self._kit

    def inputs(self) -> list[TensorMeta]:
        return list(self._inputs)

    def outputs(self) -> list[TensorMeta]:
        """The model's outputs, less those whose statistics alone were captured (compared by those, not paired)."""
        stats_only = set(self._cap().stat_names()) - set(self._cap().names()) if self._capture is not None else set()
        return [m for m in self._outputs if m.name not in stats_only]

    def _cap(self) -> Capture:
        if self._capture is None:
            self.load()
        assert self._capture is not None
        return self._capture

    def intermediates(self) -> list[str]:
        outs = {m.name for m in self._outputs}
        return [n for n in self._cap().names() if n not in outs]

    def expose(self, names: Sequence[str]) -> list[str]:
        have = set(self._cap().names())
        self._exposed = [n for n in dict.fromkeys(names) if n in have]
        return list(self._exposed)

    def infer(self, feed: Feed) -> dict[str, np.ndarray]:
        cap = self._cap()
        assert self._kit is not None
        digest = feed_digest(feed)
        if digest not in self._kit.sample_digests:
            raise BackendError(
                f"{self.captured}: no captured tensors for this feed ({_shapes([feed])}, digest {digest[:12]}): the "
                f"capture holds the kit's feeds only ({self._kit.describe()})"
            )
        if self._only is not None and digest != self._only:
            return {}  # another iteration's feed: not compared (said in `ran_as`)
        tensors = cap.iterations[self._kit.sample_digests.index(digest)]
        wanted = [m.name for m in self._outputs] + self._exposed
        return {n: tensors[n]() for n in dict.fromkeys(wanted) if n in tensors}

    def statistics(self, feed: Feed) -> dict[str, TensorStats]:
        """The tensors whose statistics alone were captured for this feed (trtexec's tensor_summary.json)."""
        cap = self._cap()
        assert self._kit is not None
        digest = feed_digest(feed)
        if digest not in self._kit.sample_digests or (self._only is not None and digest != self._only):
            return {}
        i = self._kit.sample_digests.index(digest)
        return dict(cap.statistics[i]) if i < len(cap.statistics) else {}


def named_by_layers(cap: Capture, path: Path, graph: GraphIndex, known: set[str], optional: bool) -> str:
    """Rename the capture's TensorRT-named tensors to the ONNX tensors they hold, by the engine's layer information
    at `path` (absent and `optional`: nothing renamed); what was done, for `ran_as`."""
    foreign = [n for n in cap.names() + cap.stat_names() if n not in known]
    if not foreign or (optional and not path.is_file()):
        return ""
    lmap = read_layer_map(path)
    nodes = [(n.name, list(n.output)) for n in graph.nodes]
    mapped, unmapped = onnx_names(foreign, lmap, nodes, known)
    for table in [*cap.iterations, *cap.shapes, *cap.statistics]:
        for old, new in mapped.items():
            if old in table:
                table[new] = table.pop(old)  # type: ignore[attr-defined]
    return (f"; {count(len(mapped), 'TensorRT tensor name')} mapped to ONNX tensors by {path}, "
            f"{len(unmapped)} not")  # fmt: skip


__all__ = ["CapturedBackend"]
