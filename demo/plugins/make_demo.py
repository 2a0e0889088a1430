#!/usr/bin/env python3
"""Build the plugin demo models from the trained shapes detector (CPU only, about 30 s).

Steps:
  1. load ``demo/shapes/shapes_centernet.pt`` into the three wrappers of ``shapes_plugin_models``;
  2. export them with the TorchScript exporter (``dynamo=False``, opset 17, dynamic batch), as YOLO exporters do:
     ``shapes_yolo_raw.onnx`` (the raw head ``output0`` [batch, 7, 1024], no NMS),
     ``shapes_yolo_nms.onnx`` (the raw head, then ``TRT::EfficientNMS_TRT``, box_coding 1) and
     ``shapes_plugin_nms.onnx`` (the user plugin ``shapes::ShapesBoxDecode``, then ``EfficientNMS_TRT``,
     box_coding 0); the plugin outputs' shapes are written into the graph (the exporter cannot infer them);
  3. FP16 candidates of the two plugin models with ``onnxruntime.transformers.float16.convert_float_to_float16``
     (``keep_io_types=True``; the plugin nodes kept FP32 through ``op_block_list``, the Cast pairs that the converter
     puts on their outputs -- FP32 to FP16 and straight back -- removed);
  4. try the dynamo exporter on the EfficientNMS model (it cannot use a ``symbolic``; see README.md);
  5. evaluate on ``demo/shapes/val`` with pycocotools: PyTorch, ONNX Runtime on the raw head (FP32) and on the
     FP16 candidates' graphs up to their plugins (ONNX Runtime cannot run a plugin node: the plugins' torch
     implementations run after it), and write ``metrics.json``.

Usage:
  python demo/plugins/make_demo.py [--threads 2] [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
SHAPES = HERE.parent / "shapes"
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(SHAPES))
sys.path.insert(2, str(HERE.parent))  # demo/onnx_steps.py
import shapes_plugin_models as spm  # noqa: E402
from onnx_steps import ort_session, seed_everything, toposort_graph  # noqa: E402

OPSET = 17
INPUT = "images"
RAW_OUTPUT = "output0"  # the raw head's name in Ultralytics' exports
RAW_FILE = "shapes_yolo_raw.onnx"
NMS_FILE = "shapes_yolo_nms.onnx"
PLUGIN_FILE = "shapes_plugin_nms.onnx"
NMS_FP16_FILE = "shapes_yolo_nms_fp16.onnx"
PLUGIN_FP16_FILE = "shapes_plugin_nms_fp16.onnx"
PLUGIN_OPS = ["EfficientNMS_TRT", "ShapesBoxDecode"]
M = spm.NMS_ATTRIBUTES["max_output_boxes"]
N = spm.GRID * spm.GRID


def _shapes_make_demo():
    """demo/shapes/make_demo.py (validation set loading, initializer names), imported under another name."""
    spec = importlib.util.spec_from_file_location("shapes_make_demo", SHAPES / "make_demo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -------------------------------------------------------------------------- export
def _set_shape(value, dims: list) -> None:
    shape = value.type.tensor_type.shape
    del shape.dim[:]
    for d in dims:
        dim = shape.dim.add()
        if isinstance(d, str):
            dim.dim_param = d
        else:
            dim.dim_value = d


def export(model: torch.nn.Module, path: Path, outputs: list[str], rename) -> None:
    """TorchScript exporter, opset 17, dynamic batch; plugin output shapes written into the graph."""
    import onnx

    model.eval()
    dummy = torch.zeros(2, 3, 128, 128)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (dummy,),
            str(path),
            dynamo=False,
            export_params=True,
            opset_version=OPSET,
            do_constant_folding=True,
            input_names=[INPUT],
            output_names=outputs,
            dynamic_axes={INPUT: {0: "batch"}, **{o: {0: "batch"} for o in outputs}},
        )
    m = onnx.load(str(path))
    rename(m)
    # the exporter names a plugin output's dims after the node (it has no shape inference for it): write them,
    # as YOLO exporters do
    dims = {
        "num_dets": ["batch", 1],
        "det_boxes": ["batch", M, 4],
        "det_scores": ["batch", M],
        "det_classes": ["batch", M],
        RAW_OUTPUT: ["batch", 4 + spm.NUM_CLASSES, N],
    }
    for out in m.graph.output:
        _set_shape(out, dims[out.name])
    for node in m.graph.node:
        if node.op_type == "ShapesBoxDecode":
            value = next((v for v in m.graph.value_info if v.name == node.output[0]), None)
            if value is None:
                value = m.graph.value_info.add()
                value.name = node.output[0]
                value.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
            _set_shape(value, ["batch", N, 4])
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, str(path))


def plugin_types(m) -> dict:
    """The element types of each plugin node's inputs and outputs."""
    import onnx

    types = {v.name: v.type.tensor_type.elem_type for v in [*m.graph.value_info, *m.graph.output, *m.graph.input]}
    name = {onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.FLOAT16: "float16", onnx.TensorProto.INT32: "int32"}
    return {
        n.op_type: {
            "domain": n.domain,
            "inputs": {i: name.get(types.get(i, 0), "?") for i in n.input},
            "outputs": {o: name.get(types.get(o, 0), "?") for o in n.output},
        }
        for n in m.graph.node
        if n.op_type in PLUGIN_OPS
    }


def make_fp16(src: Path, dst: Path) -> dict:
    """FP16 with float32 I/O, the plugin nodes kept FP32. Returns what the converter does to the plugin nodes by
    default (not written) and with them blocked (written)."""
    import onnx
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST, convert_float_to_float16

    default = convert_float_to_float16(onnx.load(str(src)), keep_io_types=True)
    m = convert_float_to_float16(
        onnx.load(str(src)), keep_io_types=True, op_block_list=list(DEFAULT_OP_BLOCK_LIST) + PLUGIN_OPS
    )
    removed = _drop_cast_round_trips(m.graph)
    toposort_graph(m.graph)
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, str(dst))
    return {
        "converter_default_plugin_nodes": plugin_types(default),
        "plugin_nodes": plugin_types(m),
        "cast_round_trips_removed": removed,
        "nodes": len(m.graph.node),
    }


def _drop_cast_round_trips(graph) -> int:
    """Remove Cast(to fp16) -> Cast(to fp32) pairs on a FP32 tensor: the converter puts them on the outputs of the
    nodes it keeps FP32 (they would round the plugins' FP32 outputs to FP16 and back). Returns how many."""
    import onnx

    def cast_to(node) -> int | None:
        return next((a.i for a in node.attribute if a.name == "to"), None) if node.op_type == "Cast" else None

    consumers: dict[str, list] = {}
    for node in graph.node:
        for i in node.input:
            consumers.setdefault(i, []).append(node)
    outputs = {o.name for o in graph.output}
    drop, rewire = [], {}  # rewire: tensor name -> the name it becomes
    for first in graph.node:
        if cast_to(first) != onnx.TensorProto.FLOAT16 or first.output[0] in outputs:
            continue
        users = consumers.get(first.output[0], [])
        if not users or any(cast_to(u) != onnx.TensorProto.FLOAT for u in users):
            continue
        # the FP32 tensor takes the name it had before the conversion (the converter gave it to the FP16 copy), or
        # the graph output's name
        named = [u.output[0] for u in users if u.output[0] in outputs]
        target = named[0] if named else first.output[0]
        drop += [first, *users]
        rewire.update({u.output[0]: target for u in users if u.output[0] != target})
        rewire[first.input[0]] = target
    for node in graph.node:
        for k, i in enumerate(node.input):
            node.input[k] = rewire.get(i, i)
        for k, o in enumerate(node.output):
            node.output[k] = rewire.get(o, o)
    kept = [n for n in graph.node if all(n is not d for d in drop)]
    del graph.node[:]
    graph.node.extend(kept)
    targets = set(rewire.values())
    kept_info = [v for v in graph.value_info if v.name not in rewire]
    for v in kept_info:
        if v.name in targets:
            v.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    del graph.value_info[:]
    graph.value_info.extend(kept_info)
    return sum(1 for n in drop if cast_to(n) == onnx.TensorProto.FLOAT16)


def try_dynamo(weights: dict) -> dict:
    """The dynamo exporter on the EfficientNMS model: the autograd.Function (its symbolic is not used), and the
    dynamo way of emitting a plugin node (torch.library.custom_op + an ONNX schema + custom_translation_table)."""
    import onnx
    import onnxscript
    from onnx.defs import OpSchema

    out: dict = {}
    x = torch.zeros(2, 3, 128, 128)
    batch = {"images": {0: torch.export.Dim("batch")}}
    model = spm.build_nms()
    model.load_state_dict(weights)
    model.eval()
    with tempfile.TemporaryDirectory() as d, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tmp = Path(d)
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                torch.onnx.export(model, (x,), str(tmp / "a.onnx"), dynamo=True, dynamic_shapes=batch)
            out["autograd_function"] = "exported"
        except Exception as exc:  # the expected outcome, recorded
            cause = exc
            while cause.__cause__ is not None:
                cause = cause.__cause__
            out["autograd_function"] = f"fails: {type(exc).__name__} caused by {type(cause).__name__}"

        a = spm.NMS_ATTRIBUTES
        attr = OpSchema.AttrType
        schema = OpSchema(
            "EfficientNMS_TRT",
            "TRT",
            1,
            inputs=[OpSchema.FormalParameter("boxes", "T"), OpSchema.FormalParameter("scores", "T")],
            outputs=[
                OpSchema.FormalParameter("num_dets", "tensor(int32)"),
                OpSchema.FormalParameter("det_boxes", "T"),
                OpSchema.FormalParameter("det_scores", "T"),
                OpSchema.FormalParameter("det_classes", "tensor(int32)"),
            ],
            type_constraints=[("T", ["tensor(float)", "tensor(float16)"], "")],
            attributes=[OpSchema.Attribute(k, attr.FLOAT if isinstance(v, float) else attr.INT) for k, v in a.items()]
            + [OpSchema.Attribute("plugin_version", attr.STRING)],
        )
        onnx.defs.register_schema(schema)
        trt = onnxscript.values.Opset("TRT", 1)

        @torch.library.custom_op("shapesdemo::efficient_nms", mutates_args=())
        def nms_op(
            boxes: torch.Tensor, scores: torch.Tensor
        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
            return spm.efficient_nms(boxes, scores, **a)

        @nms_op.register_fake
        def _(boxes, scores):
            b = boxes.shape[0]
            return (
                boxes.new_empty(b, 1, dtype=torch.int32),
                boxes.new_empty(b, M, 4),
                scores.new_empty(b, M),
                boxes.new_empty(b, M, dtype=torch.int32),
            )

        def nms_onnx(boxes, scores):
            return trt.EfficientNMS_TRT(boxes, scores, plugin_version="1", **a)

        class CustomOp(spm.ShapesYoloRaw):
            def forward(self, images):
                raw = self.raw_head(images)
                return nms_op(raw[:, :4].transpose(1, 2), raw[:, 4:].transpose(1, 2))

        m2 = CustomOp()
        m2.load_state_dict(weights)
        m2.eval()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            torch.onnx.export(
                m2,
                (x,),
                str(tmp / "b.onnx"),
                dynamo=True,
                dynamic_shapes=batch,
                output_names=list(spm.NMS_OUTPUTS),
                custom_translation_table={torch.ops.shapesdemo.efficient_nms.default: nms_onnx},
            )
        g = onnx.load(str(tmp / "b.onnx"))
        plugin = [n for n in g.graph.node if n.op_type == "EfficientNMS_TRT"]
        out["custom_op"] = {
            "plugin_nodes": [f"{n.domain}::{n.op_type}" for n in plugin],
            "nodes": len(g.graph.node),
            "outputs": {
                o.name: [d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim] for o in g.graph.output
            },
        }
    return out


# -------------------------------------------------------------------- evaluation
def coco_eval(ann_file: Path, doc: dict, dets: tuple[np.ndarray, ...]) -> dict:
    """pycocotools on the four NMS outputs; class index k = the k-th category id in ascending order."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    cats = sorted(c["id"] for c in doc["categories"])
    num, boxes, scores, classes = dets
    results = []
    for im, n, b, s, c in zip(doc["images"], num, boxes, scores, classes):
        for k in range(int(n[0])):
            x1, y1, x2, y2 = (float(v) for v in b[k])
            results.append(
                {"image_id": im["id"], "category_id": cats[int(c[k])], "bbox": [x1, y1, x2 - x1, y2 - y1],
                 "score": float(s[k])}
            )  # fmt: skip
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(str(ann_file))
        ev = COCOeval(gt, gt.loadRes(results), "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return {
        "mAP": round(float(ev.stats[0]), 4),
        "AP50": round(float(ev.stats[1]), 4),
        "AP75": round(float(ev.stats[2]), 4),
        "mAP_full": float(ev.stats[0]),
        "detections": len(results),
    }


def batched(fn, x: np.ndarray, batch: int = 50) -> list:
    parts = [fn(x[i : i + batch]) for i in range(0, len(x), batch)]
    return [np.concatenate([p[k] for p in parts]) for k in range(len(parts[0]))]


def nms_np(raw_boxes: np.ndarray, scores: np.ndarray, box_coding: int) -> tuple[np.ndarray, ...]:
    """The torch EfficientNMS of the demo's settings on numpy boxes [B, N, 4] and scores [B, N, C]."""
    a = {**spm.NMS_ATTRIBUTES, "box_coding": box_coding}
    out = spm.efficient_nms(torch.from_numpy(raw_boxes.astype(np.float32)), torch.from_numpy(scores), **a)
    return tuple(t.numpy() for t in out)


def up_to_plugins(path: Path, threads: int):
    """An ONNX Runtime session of the graph from `images` to the plugin nodes' inputs (onnx.utils.Extractor),
    and the names of those inputs."""
    import onnx
    import onnxruntime as ort

    m = onnx.load(str(path))
    plugins = {n.op_type: list(n.input) for n in m.graph.node if n.op_type in PLUGIN_OPS}
    produced = {o for n in m.graph.node if n.op_type in PLUGIN_OPS for o in n.output}
    names = [i for ins in plugins.values() for i in ins if i not in produced]
    sub = onnx.utils.Extractor(m).extract_model([INPUT], names)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    sess = ort.InferenceSession(sub.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess, plugins, names


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2, help="CPU threads for torch and ORT (default 2)")
    ap.add_argument("--out", type=Path, default=HERE, help="output folder (default: this script's folder)")
    args = ap.parse_args()

    import onnx
    import onnxruntime as ort
    import pycocotools

    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    seed_everything(0, args.threads)
    ort.set_default_logger_severity(3)
    shapes = _shapes_make_demo()
    weights = torch.load(SHAPES / "shapes_centernet.pt", weights_only=True)
    modules = {}
    for key, build in (("raw", spm.build_raw), ("nms", spm.build_nms), ("plugin", spm.build_plugin)):
        modules[key] = build()
        modules[key].load_state_dict(weights)
        modules[key].eval()

    # 2. export
    t = time.perf_counter()
    export(modules["raw"], out / RAW_FILE, [RAW_OUTPUT], shapes.rename_folded_initializers)
    export(modules["nms"], out / NMS_FILE, list(spm.NMS_OUTPUTS), shapes.rename_folded_initializers)
    export(modules["plugin"], out / PLUGIN_FILE, list(spm.NMS_OUTPUTS), shapes.rename_folded_initializers)
    print(f"exported {RAW_FILE}, {NMS_FILE}, {PLUGIN_FILE} ({time.perf_counter() - t:.1f}s)", flush=True)

    # 3. FP16
    fp16 = {NMS_FP16_FILE: make_fp16(out / NMS_FILE, out / NMS_FP16_FILE)}
    fp16[PLUGIN_FP16_FILE] = make_fp16(out / PLUGIN_FILE, out / PLUGIN_FP16_FILE)
    print(f"FP16: {json.dumps(fp16)}", flush=True)

    # 4. dynamo
    t = time.perf_counter()
    dynamo = try_dynamo(weights)
    print(f"dynamo exporter: {json.dumps(dynamo)} ({time.perf_counter() - t:.1f}s)", flush=True)

    # 5. evaluate
    val = SHAPES / "val"
    ann_file = val / "instances.json"
    doc, x = shapes.load_val(val)

    def torch_fn(module):
        @torch.no_grad()
        def run(xb):
            y = module(torch.from_numpy(xb))
            return [t.numpy() for t in (y if isinstance(y, tuple) else (y,))]

        return run

    raw_pt = batched(torch_fn(modules["raw"]), x)[0]
    sess = ort_session(out / RAW_FILE, args.threads)
    raw_ort = batched(lambda xb: sess.run([RAW_OUTPUT], {INPUT: xb}), x)[0]

    def split(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return raw[:, :4].transpose(0, 2, 1).copy(), raw[:, 4:].transpose(0, 2, 1).copy()

    runs = {
        "pytorch_yolo_nms": batched(torch_fn(modules["nms"]), x),
        "pytorch_plugin_nms": batched(torch_fn(modules["plugin"]), x),
        "pytorch_yolo_raw+nms": nms_np(*split(raw_pt), box_coding=1),
        "onnx_yolo_raw+nms": nms_np(*split(raw_ort), box_coding=1),
    }
    for name in (NMS_FP16_FILE, PLUGIN_FP16_FILE):
        sub, plugins, names = up_to_plugins(out / name, args.threads)
        feeds = batched(lambda xb, s=sub, n=names: s.run(n, {INPUT: xb}), x)
        values = dict(zip(names, feeds))
        if "ShapesBoxDecode" in plugins:
            wh, off = (values[i] for i in plugins["ShapesBoxDecode"])
            boxes = spm.box_decode(torch.from_numpy(wh), torch.from_numpy(off), spm.STRIDE).numpy()
            runs["onnx_plugin_nms_fp16"] = nms_np(boxes, values[plugins["EfficientNMS_TRT"][1]], box_coding=0)
        else:
            b, s = (values[i] for i in plugins["EfficientNMS_TRT"])
            runs["onnx_yolo_nms_fp16"] = nms_np(b, s, box_coding=1)

    metrics = {}
    for key, dets in runs.items():
        metrics[key] = coco_eval(ann_file, doc, tuple(dets))
        print(f"{key:22s} mAP {metrics[key]['mAP']:.4f}  AP50 {metrics[key]['AP50']:.4f}", flush=True)
    same = all(
        np.array_equal(runs["pytorch_yolo_nms"][k], runs["pytorch_yolo_raw+nms"][k]) for k in range(4)
    )  # the module's NMS is the same function: a sanity check of the wrapper

    files = {f: (out / f).stat().st_size for f in (RAW_FILE, NMS_FILE, PLUGIN_FILE, NMS_FP16_FILE, PLUGIN_FP16_FILE)}
    nodes = {}
    for f in (RAW_FILE, NMS_FILE, PLUGIN_FILE):
        g = onnx.load(str(out / f)).graph
        nodes[f] = {
            "nodes": len(g.node),
            "plugins": {
                n.op_type: {"domain": n.domain, **{a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}}
                for n in g.node
                if n.domain
            },
        }
    for info in nodes.values():
        for attrs in info["plugins"].values():
            for k, v in attrs.items():
                if isinstance(v, bytes):
                    attrs[k] = v.decode()
                elif isinstance(v, float):
                    attrs[k] = round(v, 6)
    result = {
        "source": "demo/shapes/shapes_centernet.pt (ShapesCenterNet, trained by demo/shapes/make_demo.py)",
        "nms": spm.NMS_ATTRIBUTES,
        "metrics": metrics,
        "pytorch_nms_equals_nms_on_raw_head": same,
        "raw_head_max_abs_diff_onnx_vs_pytorch": float(np.abs(raw_pt - raw_ort).max()),
        "models": nodes,
        "fp16": fp16,
        "dynamo_exporter": dynamo,
        "file_sizes_bytes": files,
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "onnx": onnx.__version__,
            "onnxruntime": ort.__version__,
            "numpy": np.__version__,
            "pycocotools": getattr(pycocotools, "__version__", "unknown"),
        },
    }
    (out / "metrics.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out / 'metrics.json'}")


if __name__ == "__main__":
    main()
