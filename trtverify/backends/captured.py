"""A candidate captured on another machine (docs/captured.md): its "run" returns the tensors a capture file holds
for the feed whose digest the capture kit recorded, so the layerwise stage compares them like any candidate's.

Nothing is run here, so nothing can be re-run: root causes are ranked from the captured tensors alone (amplification),
and a feed that is not one of the kit's is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from trtverify.backends.base import Backend, Capabilities, Feed
from trtverify.graph.onnxgraph import GraphIndex
from trtverify.graph.onnxinfo import TensorMeta, graph_io, load_io, load_onnx
from trtverify.toolout.captures import Capture, inputs_beside, read_capture, read_feeds
from trtverify.toolout.kit import MANIFEST, Kit, feed_digest, feeds_digest, find_kit, read_kit
from trtverify.util.errors import BackendError, UsageError
from trtverify.util.words import count


def _shapes(feeds: Sequence[Feed]) -> str:
    first = feeds[0] if feeds else {}
    return ", ".join(f"{n} {'x'.join(map(str, a.shape))} {a.dtype}" for n, a in sorted(first.items()))


def _clashes(got: tuple[int, ...], declared: tuple[object, ...]) -> bool:
    if len(got) != len(declared):
        return True
    return any(isinstance(d, int) and d > 0 and d != g for g, d in zip(got, declared))


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
    ):
        super().__init__()
        self.model_path = Path(model_path)
        self.captured = Path(captured)
        self.runner = runner
        self.iteration = iteration
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
        cls, model_path: Path, captured: Path, runner: str | None, iteration: int | None, samples: Sequence[Feed]
    ) -> Backend:
        return cls(model_path, captured, runner, iteration, samples)

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
        cap = read_capture(self.captured, self.runner)
        if len(cap.iterations) not in (len(kit.sample_digests), kit.iterations()):  # with the consistency feeds or not
            extra = f" and {count(len(kit.consistency), 'consistency feed')}" if kit.consistency else ""
            raise UsageError(
                f"{cap.describe()}: {count(len(cap.iterations), 'iteration')}, but its kit {manifest} holds "
                f"{count(len(kit.sample_digests), 'feed')}{extra}"
            )
        only = ""
        if self.iteration is not None:
            if self.iteration >= len(cap.iterations):
                raise UsageError(f"{cap.describe()}: no iteration {self.iteration} (iterations 0 to "
                                 f"{len(cap.iterations) - 1})")  # fmt: skip
            self._only = kit.sample_digests[self.iteration]
            only = f"; iteration {self.iteration} only, on the kit's feed {self.iteration}: other feeds not compared"
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
        inputs, outputs = graph_io(load_io(self.model_path))
        known = set(GraphIndex.from_model(load_onnx(self.model_path)).producers) | {m.name for m in inputs}
        names = cap.names()
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
            "root causes are ranked by the error each layer adds (isolation re-runs the candidate: skipped)" + only
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
        return list(self._outputs)

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


__all__ = ["CapturedBackend"]
