"""A model whose weights live in one external file, so graph surgery copies no weights."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trtverify.onnxgraph import GraphIndex


class LightModel:
    """An ONNX model with its weights moved to one external file, and its graph index.

    Each variant (extra outputs, isolation model) is saved next to the weights file, and a
    backend loads it from that path.
    """

    def __init__(self, path: Path, workdir: Path):
        import onnx

        from trtverify.onnxwire import externalize

        self.dir = Path(tempfile.mkdtemp(prefix="model-", dir=workdir))
        externalize(Path(path), self.dir / "model.onnx")  # one tensor at a time: no full copy of the weights
        self.model = onnx.load(str(self.dir / "model.onnx"), load_external_data=False)
        self.info = GraphIndex.from_model(self.model)
        self._count = 0

    def save_variant(self, model: Any) -> Path:
        import onnx

        self._count += 1
        path = self.dir / f"variant{self._count}.onnx"
        onnx.save(model, str(path))
        return path

    def with_outputs(self, names: Sequence[str]) -> Path:
        """The model with `names` added as untyped graph outputs (ONNX Runtime infers their type)."""
        import onnx

        m = onnx.ModelProto()
        m.CopyFrom(self.model)
        existing = {o.name for o in m.graph.output}
        for n in names:
            if n not in existing:
                vi = onnx.ValueInfoProto()
                vi.name = n
                m.graph.output.append(vi)
        return self.save_variant(m)
