"""A model without its weights: the graph, with each weight a reference to where its bytes already are.

`onnxwire.weightless` makes it in one walk of the file, touching no weight byte. Every variant of the graph
(exposed outputs, isolation models, an emulated twin) is then a few kilobytes that ONNX Runtime runs from
memory, reading the weights from the user's own files: nothing copies or rewrites them, whatever the size of
the model (external data beyond protobuf's 2 GiB included).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtverify.graph.onnxgraph import GraphIndex, inferred

# a session option of ONNX Runtime (>= 1.18): where a model given as bytes finds its external data
EXTERNAL_FOLDER = "session.model_external_initializers_file_folder_path"


@dataclass(frozen=True)
class GraphBytes:
    """A serialized model whose external data resolve in `folder`: what ONNX Runtime runs from memory."""

    data: bytes
    folder: Path
    name: str  # the model file it was made from, for messages


class LightModel:
    """An ONNX model with its weights left where they are, and its graph index (which reads them on demand)."""

    def __init__(self, path: Path, workdir: Path | None = None, model: Any = None, folder: Path | None = None):
        from trtverify.graph.onnxwire import weightless

        self.source = Path(path)
        if model is None:
            model, folder = weightless(self.source)
        self.model = model
        self.folder = folder if folder is not None else self.source.resolve().parent
        self.info = GraphIndex.from_model(self.model, self.folder)
        self.workdir = workdir
        self._count = 0

    @functools.cached_property
    def inferred(self) -> Any:
        """The graph after shape inference, once per model: the lint's types and shapes and the precision reading
        share it (a weightless graph: inference costs the graph's size, not the weights')."""
        return inferred(self.model)

    def derived(self, model: Any) -> LightModel:
        """Another graph over the same weights (an emulated twin, a rewrite)."""
        return LightModel(self.source, self.workdir, model, self.folder)

    def runnable(self, model: Any = None) -> GraphBytes:
        """`model` (default: this one), ready for ONNX Runtime to run from memory over the original weights."""
        return GraphBytes((self.model if model is None else model).SerializeToString(), self.folder, self.source.name)

    def with_outputs(self, names: Sequence[str]) -> GraphBytes:
        """The model with `names` added as untyped graph outputs (ONNX Runtime infers their type)."""
        import onnx

        m = onnx.ModelProto()
        m.CopyFrom(self.model)  # a weightless graph: kilobytes
        existing = {o.name for o in m.graph.output}
        for n in names:
            if n not in existing:
                vi = onnx.ValueInfoProto()
                vi.name = n
                m.graph.output.append(vi)
        return self.runnable(m)

    def save_variant(self, model: Any) -> Path:
        """`model` written as a file of its own, holding copies of the weights it uses, for a backend that reads
        a path (TensorRT's parser confirming suspects): isolation models hold a few nodes' weights."""
        import onnx
        from onnx import numpy_helper

        from trtverify.graph.onnxwire import read_external

        if self.workdir is None:
            raise ValueError("save_variant needs a workdir")
        m = onnx.ModelProto()
        m.CopyFrom(model)
        total = 0
        for i, t in enumerate(m.graph.initializer):
            if t.data_location == onnx.TensorProto.EXTERNAL:
                values = read_external(t, self.folder)
                total += values.nbytes
                m.graph.initializer[i].CopyFrom(numpy_helper.from_array(values, t.name))
        self._count += 1
        path = Path(self.workdir) / f"variant{self._count}.onnx"
        onnx.save(m, str(path), save_as_external_data=total > (1 << 30), location=f"{path.name}.data")
        return path
