"""Cutting a subgraph out of a model: the reference's nodes between the tensors fed (the cut's inputs, fed with the
reference's captured values) and the tensor that diverges, and the candidate's nodes that compute the same tensor
from the same inputs (its Q/DQ, casts and constants included).

Everything here works on weightless graphs (graph/lightmodel.py): a cut costs the size of its nodes, and its
weights stay references into the user's files until the bundle writes them (`write_model`), one tensor at a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtverify.graph.lightmodel import LightModel
from trtverify.graph.onnxgraph import GraphIndex, nested_nodes, reachable, subgraphs

ADAPTER = "reduce/"  # the name prefix of the Cast/Identity nodes a cut adds at its inputs and output


def folded(info: GraphIndex, idx: int) -> bool:
    """An Identity of a weight (torch's export of a shared parameter): a cut holds the weight under its name."""
    n = info.nodes[idx]
    return n.op_type == "Identity" and bool(n.input) and n.input[0] in info.initializers


def size(info: GraphIndex, nodes: Iterable[int]) -> int:
    """The nodes a cut's model holds (Identity nodes of weights become the weights)."""
    return sum(1 for i in nodes if not folded(info, i))


@dataclass(frozen=True)
class Cut:
    """Reference nodes (indices into GraphIndex.nodes, topological) and the tensors fed to them."""

    nodes: tuple[int, ...]
    inputs: tuple[str, ...]  # reference tensors fed with captured values (graph inputs or intermediate tensors)
    target: str  # the tensor that diverges: the cut's one output


@dataclass(frozen=True)
class Matched:
    """The candidate's nodes computing the target from the cut's inputs."""

    nodes: tuple[int, ...]  # indices into the candidate's GraphIndex.nodes, topological
    inputs: dict[str, str]  # reference input -> the candidate tensor holding its value
    target: str  # the candidate's tensor holding the target's value


def reads(info: GraphIndex, idx: int) -> list[str]:
    """What node `idx` reads: its inputs, and the outer tensors its subgraphs (If, Loop, Scan) read."""
    node = info.nodes[idx]
    out = [i for i in node.input if i]
    inner: set[str] = set()
    for sub in subgraphs(node):
        made = {o for n in nested_nodes(sub) for o in n.output} | {i.name for i in sub.input}
        made |= {t.name for t in sub.initializer}
        inner |= {i for n in nested_nodes(sub) for i in n.input if i and i not in made}
    return out + sorted(inner - set(out))


def _is_fed(info: GraphIndex, name: str, values: set[str]) -> bool:
    """A tensor a cut takes as an input rather than computing it: a graph input or a value tensor (what the
    reference's run captures); constants and shape arithmetic are computed inside the cut."""
    return name in info.inputs or name in values


def close(info: GraphIndex, seeds: Iterable[int], values: set[str], target: str) -> Cut:
    """The cut holding `seeds`, with the producers of the constants and shape arithmetic they read pulled in."""
    nodes = set(seeds)
    stack = list(nodes)
    while stack:
        for name in reads(info, stack.pop()):
            p = info.producers.get(name)
            if p is None or p.index in nodes or _is_fed(info, name, values):
                continue
            nodes.add(p.index)
            stack.append(p.index)
    made = {o for i in nodes for o in info.nodes[i].output if o}
    fed: dict[str, None] = {}
    for i in sorted(nodes):
        for name in reads(info, i):
            if name not in made and name not in info.initializers and _is_fed(info, name, values):
                fed[name] = None
    return Cut(tuple(sorted(nodes)), tuple(fed), target)


def between(info: GraphIndex, start: str, target: str) -> set[int]:
    """Nodes on a path from the producer of `start` to the producer of `target` (both included); the target's
    producer alone where `start` is not upstream of it."""
    end = info.producers[target].index
    up = {end} | reachable([end], lambda i: (info.producers[n].index for n in reads(info, i) if n in info.producers))
    first = info.producers.get(start)
    if first is None or first.index not in up:
        return {end}
    down = {first.index} | reachable(
        [first.index], lambda i: (c for o in info.nodes[i].output if o for c, _ in info.consumers[o])
    )
    return up & down


def match(cand: GraphIndex, cut: Cut, pairs: Mapping[str, str], outside: set[str]) -> Matched | str:
    """The candidate's nodes that compute the image of `cut.target` from the images of the cut's inputs, walking
    back through what the candidate alone has (Q/DQ, casts, constants); or why there are none. `outside`: the
    reference's value tensors the cut neither computes nor takes: a candidate reading one needs a larger cut."""
    image = {r: pairs.get(r, r) for r in cut.inputs}
    stops = set(image.values())
    back = {c: r for r, c in pairs.items()}
    target = pairs.get(cut.target, cut.target)
    if target not in cand.producers:
        return f"the candidate has no tensor '{target}' for the reference's '{cut.target}'"
    missing = [c for c in image.values() if c not in cand.producers and c not in cand.inputs]
    if missing:
        return f"the candidate has no tensor '{missing[0]}' to feed"
    nodes: set[int] = set()
    stack = [cand.producers[target].index]
    while stack:
        idx = stack.pop()
        if idx in nodes:
            continue
        nodes.add(idx)
        for name in reads(cand, idx):
            if name in stops or name in cand.initializers:
                continue
            if back.get(name, name) in outside:
                return f"the candidate reads '{name}', which the reference computes outside the cut"
            if name in cand.inputs:
                return f"the candidate reads its graph input '{name}', which the cut does not feed"
            p = cand.producers.get(name)
            if p is None:
                return f"the candidate reads '{name}', which nothing computes"
            stack.append(p.index)
    return Matched(tuple(sorted(nodes)), image, target)


Port = tuple[str, int, list[int], int]  # (tensor inside the graph, its element type there, shape, type outside)


def cut_model(light: LightModel, nodes: Iterable[int], inputs: Mapping[str, Port], output: tuple[str, Port],
              name: str) -> Any:  # fmt: skip
    """A weightless ModelProto of `nodes` of `light`'s graph. `inputs`: graph input -> the tensor it feeds inside,
    that tensor's element type, the shape, and the type it is fed in (the reference's): where the types differ a
    Cast is added, where only the names differ an Identity, so that both cuts of a bundle take the same values under
    the reference's names. `output`: (the graph output's name, its port): a Cast to the reference's type where the
    graph computes it in another (a narrow FP16 value read back as FP32), so that both give the same types too."""
    import onnx
    from onnx import helper

    info = light.info
    src = light.model
    picked = [info.nodes[i] for i in sorted(nodes)]
    inner = {o for n in picked for o in n.output if o}
    out_name, (out_tensor, out_type, out_shape, out_as) = output
    rename: dict[str, str] = {}
    taken = inner | set(inputs) | {out_name}
    adapters_in = []
    for gin, (tensor, elem, _shape, fed_as) in inputs.items():
        if tensor == gin and elem == fed_as:
            continue
        fed = tensor if tensor != gin else _fresh(f"{tensor}__{_type_name(elem)}", taken)
        rename[tensor] = fed
        if elem != fed_as:
            adapters_in.append(helper.make_node("Cast", [gin], [fed], name=f"{ADAPTER}cast_in/{gin}", to=elem))
        else:
            adapters_in.append(helper.make_node("Identity", [gin], [fed], name=f"{ADAPTER}in/{gin}"))
    if out_tensor == out_name and out_type != out_as:  # the narrow value gets a name of its own, the cast the output's
        rename[out_tensor] = _fresh(f"{out_tensor}__{_type_name(out_type)}", taken)
    body = []
    aliases = []  # an Identity of a weight (torch's export of a shared parameter): the weight under its output's name
    weights = {t.name: t for t in src.graph.initializer}
    for n in picked:
        if n.op_type == "Identity" and n.input[0] in weights and n.output[0] not in rename:
            alias = onnx.TensorProto()
            alias.CopyFrom(weights[n.input[0]])
            alias.name = n.output[0]
            aliases.append(alias)
            continue
        copy = onnx.NodeProto()
        copy.CopyFrom(n)
        del copy.input[:]
        del copy.output[:]
        copy.input.extend(rename.get(i, i) for i in n.input)
        copy.output.extend(rename.get(o, o) for o in n.output)
        body.append(copy)
    final = rename.get(out_tensor, out_tensor)
    adapters_out = []
    if out_type != out_as:
        adapters_out.append(helper.make_node("Cast", [final], [out_name], name=f"{ADAPTER}cast_out/{out_name}",
                                             to=out_as))  # fmt: skip
    elif final != out_name:
        adapters_out.append(helper.make_node("Identity", [final], [out_name], name=f"{ADAPTER}out/{out_name}"))
    all_nodes = adapters_in + body + adapters_out
    used = {i for n in all_nodes for i in reads_of(n)}
    inits = [t for t in src.graph.initializer if t.name in used] + [a for a in aliases if a.name in used]
    sparse = [t for t in src.graph.sparse_initializer if t.values.name in used]
    g_in = [helper.make_tensor_value_info(gin, fed_as, shape) for gin, (_t, _e, shape, fed_as) in inputs.items()]
    if src.ir_version < 4:  # every initializer must also be a graph input there
        g_in += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in inits]
    g_out = [helper.make_tensor_value_info(out_name, out_as, out_shape)]
    graph = helper.make_graph(all_nodes, name, g_in, g_out, inits)
    graph.sparse_initializer.extend(sparse)
    model = helper.make_model(graph, opset_imports=list(src.opset_import), ir_version=src.ir_version)
    model.producer_name = "trtverify reduce"
    used_ops = {(n.domain, n.op_type) for n in all_nodes}
    model.functions.extend(f for f in src.functions if (f.domain, f.name) in used_ops)
    return model


def reads_of(node: Any) -> set[str]:
    """Every name a node reads, its subgraphs' outer reads included."""
    names = {i for i in node.input if i}
    for sub in subgraphs(node):
        names |= {i for n in nested_nodes(sub) for i in n.input if i}
    return names


def _fresh(name: str, taken: set[str]) -> str:
    out, k = name, 1
    while out in taken:
        k += 1
        out = f"{name}{k}"
    taken.add(out)
    return out


def _type_name(elem: int) -> str:
    import onnx

    return onnx.TensorProto.DataType.Name(elem).lower()


def has_external_files(light: LightModel) -> bool:
    """Whether the model keeps weights in files of their own (external data), not inside the .onnx file."""
    own = light.source.resolve().name
    for t in light.model.graph.initializer:
        loc = next((e.value for e in t.external_data if e.key == "location"), None)
        if loc is not None and loc != own:
            return True
    return False


EMBED_LIMIT = 1 << 30  # weights above this are written external whatever the source did (protobuf's 2 GiB limit)


def write_model(model: Any, folder: Path, path: Path, external: bool) -> tuple[int, str | None]:
    """Write weightless `model`, whose weights resolve in `folder`, to `path` with its weights: in a data file beside
    it (`path.name + '.data'`) where `external` or they are large, else inside. Each weight's bytes are copied as
    stored, one tensor at a time. Returns (weight bytes written, the data file's name or None)."""
    import onnx

    from trtverify.util.fsutil import atomic_write

    refs = [t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    total = sum(int(_entries(t).get("length", 0) or 0) for t in refs)
    external = external or total > EMBED_LIMIT
    data_name = f"{path.name}.data" if external and refs else None
    out = onnx.ModelProto()
    out.CopyFrom(model)
    offset = 0
    handle = open(path.parent / data_name, "wb") if data_name else None  # noqa: SIM115 - closed below
    try:
        for t in out.graph.initializer:
            if t.data_location != onnx.TensorProto.EXTERNAL:
                continue
            raw = _raw_bytes(t, folder)
            del t.external_data[:]
            if handle is not None:
                handle.write(raw)
                for k, v in (("location", data_name), ("offset", str(offset)), ("length", str(len(raw)))):
                    entry = t.external_data.add()
                    entry.key, entry.value = k, v
                offset += len(raw)
            else:
                t.data_location = onnx.TensorProto.DEFAULT
                t.raw_data = raw
    finally:
        if handle is not None:
            handle.close()
    data = out.SerializeToString()
    atomic_write(path, lambda fh: fh.write(data))
    return total, data_name


def _entries(t: Any) -> dict[str, str]:
    return {e.key: e.value for e in t.external_data}


def _raw_bytes(t: Any, folder: Path) -> bytes:
    """The stored bytes of an external-data tensor (its little-endian values, whatever its type)."""
    from trtverify.graph.onnxwire import escaping

    e = _entries(t)
    location = e.get("location", "")
    why = escaping(folder / "model.onnx", location)
    if why:
        raise ValueError(f"tensor '{t.name}': external data location '{location}' {why}")
    offset = int(e.get("offset", 0) or 0)
    with open(folder / location, "rb") as fh:
        fh.seek(offset)
        return fh.read(int(e["length"])) if e.get("length") else fh.read()
