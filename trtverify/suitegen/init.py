"""`trtverify init MODEL.onnx`: a commented suite for the user's model, ready for `validate` and `run`.

Inputs are generated from the model's declared input shapes (a dynamic dimension is given 1, said in
a comment); the stages are those the arguments make possible: framework with a PyTorch source,
layerwise with candidates (without either, an FP16 recipe candidate so that layerwise has something
to compare); e2e and perf as commented-out examples. Paths are written relative to the suite's folder.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from trtverify.graph.onnxinfo import TensorMeta, graph_io, load_io
from trtverify.util.errors import UsageError
from trtverify.util.hooks import is_hook_spec

_GENERATED = ("float32", "float16", "float64", "int64", "int32", "int8", "uint8", "bool")


def _rel(path: Path, folder: Path) -> str:
    return Path(os.path.relpath(Path(path).resolve(), folder.resolve())).as_posix()


def _q(text: str) -> str:
    """A YAML scalar: plain where safe, else double-quoted (JSON strings are valid YAML)."""
    import yaml

    plain = bool(text) and all(c.isalnum() or c in "._/-" for c in text) and text[0] not in "-."
    return text if plain and yaml.safe_load(text) == text else json.dumps(text)


def _name(stem: str) -> str:
    out = "".join(c if c.isalnum() or c in "_.-" else "_" for c in stem)
    return out if out and out[0].isalnum() else f"m{out}"


def _sweep_lines(inputs: list[TensorMeta]) -> list[str]:
    """A commented shape sweep where the model declares dynamic dimensions: the generated shape (1 for each
    dynamic dimension), then 8 and 32, the sizes an engine is typically asked to serve."""
    dynamic = [m for m in inputs if m.shape and any(not (isinstance(d, int) and d > 0) for d in m.shape)]
    if not dynamic:
        return []
    sets = []
    for size in (1, 8, 32):
        shapes = {m.name: [d if isinstance(d, int) and d > 0 else size for d in (m.shape or ())] for m in dynamic}
        sets.append("{" + ", ".join(f"{_q(n)}: {json.dumps(v)}" for n, v in shapes.items()) + "}")
    return [
        "  # shapes:                         # a shape sweep: framework and layerwise run once per set "
        "(docs/suites.md#shape-sweeps)",
        *(f"  #   - {s}" for s in sets),
    ]


def _input_line(m: TensorMeta, model: str) -> list[str]:
    if m.shape is None:
        raise UsageError(f"{model}: input '{m.name}' has no declared shape; write inputs.generate by hand")
    shape, dynamic = [], []
    for i, d in enumerate(m.shape):
        if isinstance(d, int) and d > 0:
            shape.append(d)
        else:
            shape.append(1)
            dynamic.append(f"dimension {i} ({d!r})" if isinstance(d, str) else f"dimension {i}")
    dtype = m.dtype if m.dtype in _GENERATED else "float32"
    lines = []
    if dynamic:
        lines.append(f"    # {', '.join(dynamic)} is dynamic in the model: 1 here; set the size you deploy with")
    if dtype != m.dtype:
        lines.append(f"    # the model declares {m.dtype}; generated inputs are one of {', '.join(_GENERATED)}")
    span = "[0, 1]" if dtype.startswith("float") else "[0, 10]"
    lines.append(f"    {_q(m.name)}: {{shape: {json.dumps(shape)}, dtype: {dtype}, range: {span}}}")
    return lines


def _candidate_names(paths: Sequence[Path]) -> list[str]:
    taken: set[str] = set()
    names = []
    for p in paths:
        base, name, i = _name(Path(p).stem), _name(Path(p).stem), 2
        while name in taken:
            name, i = f"{base}_{i}", i + 1
        taken.add(name)
        names.append(name)
    return names


def _plugin_lines(model: Path) -> list[str]:
    """A `plugins:` section for the model's plugin nodes (docs/plugins.md): commented where trtverify has a
    reference, to fill in where it has none."""
    from trtverify.graph.onnxwire import weightless
    from trtverify.plugins.onnxops import plugin_nodes
    from trtverify.plugins.registry import BUILTIN

    ops = list(dict.fromkeys(n.op_type for n in plugin_nodes(weightless(model)[0])))
    if not ops:
        return []
    out = ["", "# plugin nodes (ops ONNX Runtime does not have; docs/plugins.md): each needs a reference"]
    missing = [op for op in ops if op not in BUILTIN]
    out.append("plugins:" if missing else "# plugins:")
    for op in ops:
        if op in BUILTIN:
            out.append(f"  # {op}: built-in reference ({BUILTIN[op].split(':')[0]})")
        else:
            out.append(f"  {op}: my_plugins:{op.lower()}   # no built-in reference: your numpy function (inputs, "
                       "**attributes) -> outputs")  # fmt: skip
    return out


def _image_size(inputs: list[TensorMeta]) -> tuple[int, int] | None:
    """The height and width the first input fixes ([N, C, H, W] or [C, H, W]), else None."""
    shape = inputs[0].shape if inputs else None
    if shape is None or len(shape) not in (3, 4):
        return None
    h, w = shape[-2], shape[-1]
    return (h, w) if isinstance(h, int) and isinstance(w, int) and h > 0 and w > 0 else None


def _e2e_lines(model: Path, outputs: list[TensorMeta], size: tuple[int, int] | None) -> list[str]:
    """The commented e2e example: detection with the layout found where an NMS ends the model, else
    classification."""
    from trtverify.graph.onnxwire import weightless
    from trtverify.suitegen.detection import detector, e2e_lines

    det = detector(weightless(model)[0], outputs)
    if det is not None:
        return e2e_lines(det, _q, size)
    return [
        "  # e2e:                            # task metrics on a validation set, gated on the drop",
        "  #   task: classification",
        "  #   dataset: {npz: val.npz}       # images and labels arrays; or folder:, csv:, coco:",
        "  #   preprocess: {resize: [224, 224], mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}",
        f"  #   postprocess: {{output: {_q(outputs[0].name) if outputs else 'logits'}}}",
        "  #   gates: [{metric: accuracy, max_drop: 0.005}]",
    ]


def suite_text(
    model: Path,
    suite_path: Path,
    *,
    pytorch: str | None = None,
    weights: Path | None = None,
    candidates: Sequence[Path] = (),
) -> str:
    """The suite file's text; UsageError when an argument cannot be used."""
    if pytorch is not None and not is_hook_spec(pytorch):
        raise UsageError(f"--pytorch '{pytorch}': expected module:callable (a function returning the nn.Module)")
    if weights is not None and pytorch is None:
        raise UsageError("--weights goes with --pytorch (the state_dict of the factory's model)")
    inputs, outputs = graph_io(load_io(model))
    if not inputs:
        raise UsageError(f"{model}: the model has no inputs to generate")
    folder = suite_path.resolve().parent
    name = _name(model.stem)
    out = [
        f"# trtverify suite for {model.name}, written by `trtverify init`.",
        f"# Check it: trtverify validate {suite_path.name}      Run it: trtverify run {suite_path.name}",
        "# Every key is described in docs/suite-reference.md (or: trtverify schema --markdown).",
        f"name: {name}",
        "# python_path: [.]                  # where 'module:callable' hooks are imported from (default: this folder)",
        f"# out: reports/{name}".ljust(35) + " # where `run` writes, relative to this file (default: reports/<name> of "
        "the current folder)",
        *_plugin_lines(model),
        "",
        "models:",
        f"  reference: {_q(_rel(model, folder))}   # the FP32 ONNX model everything is compared with",
    ]
    if pytorch is not None:
        out += [
            "  pytorch:                          # the PyTorch source of the reference (stage framework)",
            f"    factory: {_q(pytorch)}",
        ]
        if weights is not None:
            out.append(f"    weights: {_q(_rel(weights, folder))}   # state_dict, loaded with weights_only=True")
        else:
            out.append("    # weights: model.pt              # a state_dict, if the factory does not load its weights")
        names = ", ".join(_q(m.name) for m in outputs)
        out.append(f"    output_names: [{names}]   # forward()'s results in order, named as in the ONNX")
    out.append("  candidates:                       # the models under test: name -> ONNX file")
    cand_names = _candidate_names(candidates)
    for cname, path in zip(cand_names, candidates):
        out.append(f"    {cname}: {_q(_rel(path, folder))}")
    if not candidates:
        out += [
            "    # my_int8: model_int8.onnx       # your own candidate; until then, a lowering trtverify makes:",
            "    fp16: {from: reference, precision: fp16}",
        ]
    out += [
        "    # trt_fp16: {path: model.onnx, backend: tensorrt}   # built and run by TensorRT (needs a GPU)",
        "",
        "inputs:                             # random inputs from the model's declared shapes",
        "  samples: 4",
        "  seed: 0",
        "  generate:                         # for real samples, use the file: line below instead",
    ]
    for m in inputs:
        out += _input_line(m, model.name)
    out += _sweep_lines(inputs)
    out += [
        "  # file: inputs.npz                # instead of generate: real samples, .npz keys = input names, "
        "first axis = rows",
        "",
        "stages:",
    ]
    if pytorch is not None:
        out += [
            "  framework: {}                     # PyTorch vs ONNX Runtime on every output (default checks)",
        ]
    out += [
        "  layerwise: {}                     # every intermediate tensor of each candidate vs the reference",
        *_e2e_lines(model, outputs, _image_size(inputs)),
        "  # perf:                           # latency and throughput of the reference and candidates, measured here",
        "  #   batch_sizes: [1, 8]           # in ONNX Runtime (CPU or GPU); TensorRT engines: from trtexec's exports",
        f"  #   candidates: [{(cand_names or ['fp16'])[0]}]",
        "",
    ]
    return "\n".join(out)
