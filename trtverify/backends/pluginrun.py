"""Running a graph that holds TensorRT plugin nodes in ONNX Runtime: split at the plugins.

ONNX Runtime refuses a whole graph when one node is an op it does not know (`TRT:EfficientNMS_TRT(-1) is not a
registered function/op`). Here the graph is cut at its plugin nodes: the nodes ONNX Runtime can run form segments,
each a session of its own; a plugin node with a reference (trtverify/plugins/registry.py) is computed between them
in numpy. A plugin without a reference computes nothing, and neither does anything downstream of it: those tensors
are `uncomputed`, each with the plugin it waits on, and every other tensor is computed as in one session.

A segment is made when it first runs, its inputs typed from the arrays that reach it; it reads its weights where
they are (a weightless graph), like every other variant of the model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trtverify.graph.lightmodel import GraphBytes
from trtverify.graph.onnxemulate import emulate, holds
from trtverify.graph.onnxgraph import GraphIndex, subgraphs, values_of
from trtverify.plugins.onnxops import is_plugin, label
from trtverify.plugins.registry import ONNXRUNTIME, Plugins
from trtverify.util.errors import BackendError

MakeSession = Callable[[GraphBytes], Any]


def _reads(node: Any) -> list[str]:
    """Every tensor `node` reads, its subgraphs' outer-scope reads included."""
    names = [x for x in node.input if x]
    for sub in subgraphs(node):
        inner = {o for n in sub.node for o in n.output} | {i.name for i in sub.input}
        inner |= {t.name for t in sub.initializer}
        for n in sub.node:
            names += [x for x in _reads(n) if x not in inner]
    return names


@dataclass
class _Output:
    name: str


@dataclass
class Plan:
    """Segments (node lists ONNX Runtime runs) and, after each, the plugin nodes computed in numpy."""

    segments: list[list[Any]]
    after: list[list[Any]]  # after[k]: plugin nodes that run once segment k has run
    uncomputed: dict[str, str] = field(default_factory=dict)  # tensor -> the plugin without a reference it waits on
    needed: set[str] = field(default_factory=set)  # tensors read across a cut: kept between steps


def plan(model: Any, plugins: Plugins, libraries: bool = False) -> Plan:
    """Cut `model` at its plugin nodes. `libraries`: custom-op libraries are registered, and ONNX Runtime is given
    every unknown op that has no reference (a library may provide it)."""
    info = GraphIndex.from_model(model)
    # when a tensor exists: 0 before any segment, 2k + 1 once segment k has run, 2k + 2 once the plugins after
    # segment k have run
    ready: dict[str, int] = {}
    uncomputed: dict[str, str] = {}
    segments: list[list[Any]] = []
    after: list[list[Any]] = []

    def grow(k: int) -> None:
        while len(segments) <= k:
            segments.append([])
            after.append([])

    for n in info.nodes:
        reads = _reads(n)
        blocked = next((uncomputed[x] for x in reads if x in uncomputed), None)
        spec = plugins.spec(n.op_type)
        plugin = is_plugin(n) and spec != ONNXRUNTIME and not (spec is None and libraries)
        if blocked is None and plugin and spec is None:
            blocked = f"after plugin {label(n)} (no reference)"
        if blocked is not None:
            uncomputed.update((o, blocked) for o in n.output if o)
            continue
        last = max((ready.get(x, 0) for x in reads), default=0)
        if plugin:  # after the segment that made its last input (plugins after one segment: in graph order)
            k = max(0, (last - 1) // 2)
            grow(k)
            after[k].append(n)
            ready.update((o, 2 * k + 2) for o in n.output if o)
        else:
            k = last // 2
            grow(k)
            segments[k].append(n)
            ready.update((o, 2 * k + 1) for o in n.output if o)
    # tensors made in one step and read in another: each step's session outputs them
    made = {o for step in [*segments, *after] for n in step for o in n.output if o}
    needed: set[str] = set()
    for step in [*segments, *after]:
        own = {o for n in step for o in n.output}
        needed.update(x for n in step for x in _reads(n) if x in made and x not in own)
    return Plan(segments, after, uncomputed, needed)


def _as_inputs(inputs: Sequence[np.ndarray | None], outputs: list[np.ndarray]) -> list[np.ndarray]:
    """A plugin fed FP16 computes in FP16, as TensorRT runs it: FP32 outputs of its reference rounded to FP16."""
    first = next((a for a in inputs if a is not None and a.dtype.kind == "f"), None)
    if first is None or first.dtype != np.float16:
        return outputs
    return [o.astype(np.float16) if o.dtype == np.float32 else o for o in outputs]


class SegmentedSession:
    """What OnnxRuntimeBackend needs of an InferenceSession (`run`, `get_outputs`), for a graph with plugins."""

    def __init__(
        self,
        model: GraphBytes,
        plugins: Plugins,
        make_session: MakeSession,
        libraries: bool = False,
        emulate: frozenset[int] = frozenset(),
    ):
        import onnx

        self._model = onnx.ModelProto.FromString(model.data)
        self._bytes = model
        self._plugins = plugins
        self._make = make_session
        self.plan = plan(self._model, plugins, libraries)
        self._outputs = [o.name for o in self._model.graph.output if o.name not in self.plan.uncomputed]
        if not self._outputs:
            why = sorted(set(self.plan.uncomputed.values()))
            raise BackendError(
                f"{model.name}: nothing it outputs can be computed here: {'; '.join(why)}. Not an op ONNX Runtime "
                "has: a TensorRT plugin? Give it a reference (--plugin OP=module:callable, the suite's plugins:, or "
                "backends.onnxruntime.custom_op_libraries; docs/plugins.md)"
            )
        self._sessions: dict[int, Any] = {}
        self._emulate = emulate  # narrow types each segment emulates (onnxemulate.py), once its input types are known
        self._labels = {id(n): label(n) for nodes in self.plan.after for n in nodes}
        self._weights = {t.name: t for t in self._model.graph.initializer}
        self._read: dict[str, np.ndarray] = {}

    def _weight(self, name: str) -> np.ndarray:
        if name not in self._read:
            value = values_of(self._weights[name], self._bytes.folder)
            if value is None:
                raise BackendError(f"{self._bytes.name}: cannot read the weight {name} a plugin node reads")
            self._read[name] = np.asarray(value)
        return self._read[name]

    def get_outputs(self) -> list[_Output]:
        return [_Output(n) for n in self._outputs]

    def _segment(self, k: int, values: dict[str, np.ndarray]) -> Any:
        """Segment k's session, made on first use: its inputs typed from the values that reach it."""
        if k in self._sessions:
            return self._sessions[k]
        import onnx
        from onnx import helper

        src = self._model.graph
        seg = self.plan.segments[k]
        own = {o for n in seg for o in n.output if o}
        reads = {x for n in seg for x in _reads(n)}
        inits = [t for t in src.initializer if t.name in reads]
        init_names = {t.name for t in inits}
        declared = {vi.name: vi for vi in src.input}
        m = onnx.ModelProto()
        m.CopyFrom(self._model)
        g = m.graph
        del g.node[:], g.input[:], g.output[:], g.initializer[:], g.sparse_initializer[:]
        g.node.extend(seg)
        g.initializer.extend(inits)
        for x in sorted(reads - own - init_names):
            if x in declared:
                g.input.append(declared[x])
            elif x in values:
                arr = values[x]
                elem = helper.np_dtype_to_tensor_dtype(arr.dtype)
                g.input.append(helper.make_tensor_value_info(x, elem, [None] * arr.ndim))
        wanted = set(self.plan.needed) | set(self._outputs)
        for o in [o for n in seg for o in n.output if o in wanted]:
            vi = onnx.ValueInfoProto()
            vi.name = o
            g.output.append(vi)
        if self._emulate and holds(m, self._emulate):
            m, _ = emulate(m, self._emulate)
        self._sessions[k] = self._make(GraphBytes(m.SerializeToString(), self._bytes.folder, self._bytes.name))
        return self._sessions[k]

    def run(self, names: Sequence[str] | None, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        values: dict[str, np.ndarray] = dict(feed)
        for k, seg in enumerate(self.plan.segments):
            if seg:
                sess = self._segment(k, values)
                wanted_in = {i.name for i in sess.get_inputs()}
                outs = [o.name for o in sess.get_outputs()]
                got = sess.run(outs, {x: v for x, v in values.items() if x in wanted_in})
                values.update(zip(outs, got))
            for n in self.plan.after[k]:
                for x in n.input:
                    if x and x not in values and x in self._weights:  # a weight the plugin reads, read once
                        values[x] = self._weight(x)
                missing = [x for x in n.input if x and x not in values]
                if missing:
                    raise BackendError(f"plugin {self._labels[id(n)]}: input(s) {', '.join(missing)} not computed")
                args = [values[x] if x else None for x in n.input]
                outs = self._plugins.run(n, self._labels[id(n)], args)
                values.update(zip(n.output, _as_inputs(args, outs)))
        names = list(names) if names is not None else self._outputs
        return [values[n] for n in names]
