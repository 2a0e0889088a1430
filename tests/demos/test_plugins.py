"""The plugin demo (demo/plugins): its committed models are what its PyTorch modules export today, the plugin nodes
carry the attributes the README gives, the user plugin's numpy reference equals its torch version on the detector's
real maps, and the modules' NMS (the PyTorch side of EfficientNMS_TRT) agrees with trtverify's own NMS."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.numpy_helper
import onnxruntime as ort
import pytest

from tests.conftest import ROOT
from trtverify.tasks.detlayouts import greedy_nms

torch = pytest.importorskip("torch")

PLUGINS = ROOT / "demo" / "plugins"
WEIGHTS = ROOT / "demo" / "shapes" / "shapes_centernet.pt"


@pytest.fixture(scope="module")
def demo():
    """demo/plugins/make_demo.py and shapes_plugin_models, imported from their folder."""
    sys.path.insert(0, str(PLUGINS))
    try:
        spec = importlib.util.spec_from_file_location("plugins_make_demo", PLUGINS / "make_demo.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        import shapes_plugin_models
        import shapes_plugins
    finally:
        sys.path.remove(str(PLUGINS))
    return module, shapes_plugin_models, shapes_plugins


def loaded(spm, build: str):
    model = getattr(spm, build)()
    model.load_state_dict(torch.load(WEIGHTS, weights_only=True))
    return model.eval()


def _tensors(graph: onnx.GraphProto) -> dict[str, onnx.TensorProto]:
    """The graph's weights: its initializers and the Constant nodes' values."""
    out = {t.name: t for t in graph.initializer}
    for node in graph.node:
        out.update({f"{node.output[0]}.{a.name}": a.t for a in node.attribute if a.type == onnx.AttributeProto.TENSOR})
    return out


def assert_same_model(made: onnx.ModelProto, committed: onnx.ModelProto, what: str, maxulp: int = 4) -> None:
    """The same graph, node for node and attribute for attribute, with weights equal to a few ULP: folding a
    BatchNorm into a convolution rounds differently on another CPU (issue 45: 1 ULP), a changed model does not."""
    a, b = made.graph, committed.graph
    ta, tb = _tensors(a), _tensors(b)
    assert ta.keys() == tb.keys(), f"{what}: other weights"
    for name in ta:
        x, y = onnx.numpy_helper.to_array(ta[name]), onnx.numpy_helper.to_array(tb[name])
        assert x.dtype == y.dtype and x.shape == y.shape, f"{what}: {name} {x.dtype}{x.shape} vs {y.dtype}{y.shape}"
        if np.issubdtype(x.dtype, np.floating):
            try:
                np.testing.assert_array_max_ulp(x, y, maxulp=maxulp)
            except AssertionError as exc:
                raise AssertionError(f"{what}: {name} differs by more than {maxulp} ULP: {exc}") from None
        else:
            np.testing.assert_array_equal(x, y, err_msg=f"{what}: {name}")
    for t in (*ta.values(), *tb.values()):  # the values are compared: the rest must be equal as it is
        for field in ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
            t.ClearField(field)
    assert a == b, f"{what}: the graph differs"


def test_committed_models_are_what_the_modules_export(demo, tmp_path: Path):
    make, spm, _ = demo
    shapes = make._shapes_make_demo()
    for build, name, outputs in (
        ("build_raw", make.RAW_FILE, [make.RAW_OUTPUT]),
        ("build_nms", make.NMS_FILE, list(spm.NMS_OUTPUTS)),
        ("build_plugin", make.PLUGIN_FILE, list(spm.NMS_OUTPUTS)),
    ):
        make.export(loaded(spm, build), tmp_path / name, outputs, shapes.rename_folded_initializers)
        assert_same_model(onnx.load(str(tmp_path / name)), onnx.load(str(PLUGINS / name)),
                          f"{name} is out of date: python demo/plugins/make_demo.py")  # fmt: skip
    for src, dst in ((make.NMS_FILE, make.NMS_FP16_FILE), (make.PLUGIN_FILE, make.PLUGIN_FP16_FILE)):
        make.make_fp16(tmp_path / src, tmp_path / dst)
        assert_same_model(onnx.load(str(tmp_path / dst)), onnx.load(str(PLUGINS / dst)), dst)
    # what the few ULP allow: a weight changed by 1e-4 of itself, or a node's attribute, is a different model
    committed = onnx.load(str(PLUGINS / make.PLUGIN_FILE))
    for change in ("weight", "attribute"):
        other = onnx.load(str(PLUGINS / make.PLUGIN_FILE))
        if change == "weight":
            w = next(t for t in other.graph.initializer if t.data_type == onnx.TensorProto.FLOAT and t.dims)
            w.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(w) * np.float32(1 + 1e-4), w.name))
        else:
            attr = next(a for n in other.graph.node if n.op_type == "Conv" for a in n.attribute if a.name == "pads")
            attr.ints[0] += 1
        with pytest.raises(AssertionError, match="differs"):
            assert_same_model(other, onnx.load(str(PLUGINS / make.PLUGIN_FILE)), change)
    assert_same_model(committed, onnx.load(str(PLUGINS / make.PLUGIN_FILE)), "the same file")


def plugin_nodes(name: str) -> dict[str, onnx.NodeProto]:
    return {n.op_type: n for n in onnx.load(str(PLUGINS / name)).graph.node if n.domain}


def test_plugin_nodes_as_documented_and_kept_fp32_in_the_fp16_candidates():
    nms = plugin_nodes("shapes_yolo_nms.onnx")["EfficientNMS_TRT"]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in nms.attribute}
    assert nms.domain == "TRT" and list(nms.output) == ["num_dets", "det_boxes", "det_scores", "det_classes"]
    assert attrs == {
        "background_class": -1,
        "box_coding": 1,
        "class_agnostic": 0,
        "iou_threshold": pytest.approx(0.5),
        "max_output_boxes": 100,
        "plugin_version": b"1",
        "score_activation": 0,
        "score_threshold": pytest.approx(0.05),
    }
    plugin = plugin_nodes("shapes_plugin_nms.onnx")
    assert (
        plugin["ShapesBoxDecode"].domain == "shapes"
        and list(plugin["EfficientNMS_TRT"].input)[0] == list(plugin["ShapesBoxDecode"].output)[0]
    )
    for name in ("shapes_yolo_nms_fp16.onnx", "shapes_plugin_nms_fp16.onnx"):
        g = onnx.load(str(PLUGINS / name)).graph
        types = {v.name: v.type.tensor_type.elem_type for v in [*g.value_info, *g.output]}
        produced = {o: n for n in g.node for o in n.output}
        for node in (n for n in g.node if n.domain):
            for i in node.input:  # FP32 inputs: a Cast to float32, or the other (FP32) plugin
                src = produced[i]
                assert src.domain or (src.op_type == "Cast" and src.attribute[0].i == onnx.TensorProto.FLOAT), i
            floats = [o for o in node.output if types.get(o) != onnx.TensorProto.INT32]
            assert all(types[o] == onnx.TensorProto.FLOAT for o in floats), (name, node.op_type)
            # no Cast pair (FP32 -> FP16 -> FP32) left on its outputs
            assert not any(n.op_type == "Cast" and set(n.input) & set(node.output) for n in g.node), node.op_type


def test_onnx_runtime_cannot_load_the_plugin_models():
    """Why trtverify must run around plugin nodes: ONNX Runtime refuses the graph."""
    with pytest.raises(Exception, match="EfficientNMS_TRT"):
        ort.InferenceSession(str(PLUGINS / "shapes_yolo_nms.onnx"), providers=["CPUExecutionProvider"])


def test_user_plugin_reference_equals_its_torch_version_on_real_maps(demo):
    _, spm, plugins = demo
    model = loaded(spm, "build_plugin")
    x = torch.from_numpy(np.random.default_rng(0).random((3, 3, 128, 128), dtype=np.float32))
    with torch.no_grad():
        _, wh, offset = spm.ShapesCenterNet.forward(model, x)
    want = spm.box_decode(wh, offset, 4).numpy()
    got = plugins.decode(wh.numpy(), offset.numpy(), stride=4, plugin_version="1")  # extra attributes are ignored
    assert got.dtype == np.float32 and got.shape == (3, 1024, 4)
    np.testing.assert_array_equal(got, want)
    # position p = row * 32 + col is centred at ((col + offset_x) * 4, (row + offset_y) * 4)
    p, row, col = 32 * 5 + 7, 5, 7
    cx = (col + offset[1, 0, row, col].item()) * 4
    assert (got[1, p, 0] + got[1, p, 2]) / 2 == pytest.approx(cx, abs=1e-4)
    half = plugins.decode(wh.numpy().astype(np.float16), offset.numpy().astype(np.float16))
    assert half.dtype == np.float16  # an FP16 plugin gives FP16 boxes


def test_module_nms_agrees_with_trtverify_nms_on_the_detector(demo):
    """Two implementations of EfficientNMS_TRT's rule (the demo's torch one, trtverify's numpy one) on the demo's
    raw heads, and the attributes the demo does not set (class_agnostic, background_class, score_activation)."""
    _, spm, _ = demo
    from PIL import Image

    images = sorted((ROOT / "demo" / "shapes" / "val" / "images").glob("*.png"))[:8]
    x = torch.from_numpy(np.stack([np.asarray(Image.open(p).convert("RGB")) for p in images]).transpose(0, 3, 1, 2))
    with torch.no_grad():
        raw = loaded(spm, "build_raw")(x.float() / 255)
    boxes, scores = raw[:, :4].transpose(1, 2), raw[:, 4:].transpose(1, 2)
    compared = 0
    for kw in ({}, {"class_agnostic": 1}, {"score_threshold": 0.01, "iou_threshold": 0.3, "max_output_boxes": 7}):
        a = {**spm.NMS_ATTRIBUTES, "box_coding": 1, **kw}
        num, det_boxes, det_scores, det_classes = (t.numpy() for t in spm.efficient_nms(boxes, scores, **a))
        for i in range(len(x)):
            cx, cy, w, h = boxes[i].numpy().astype(np.float64).T
            corners = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
            want = greedy_nms(corners, scores[i].numpy().astype(np.float64), score_threshold=a["score_threshold"],
                              iou_threshold=a["iou_threshold"], max_detections=a["max_output_boxes"],
                              class_agnostic=bool(a["class_agnostic"]))  # fmt: skip
            n = int(num[i, 0])
            assert n == len(want)
            np.testing.assert_allclose(det_boxes[i, :n], want[:, :4], atol=1e-4)
            np.testing.assert_array_equal(det_scores[i, :n], want[:, 4].astype(np.float32))
            np.testing.assert_array_equal(det_classes[i, :n], want[:, 5])
            assert not det_boxes[i, n:].any() and not det_scores[i, n:].any()  # zero padding
            compared += n
    assert compared > 100
    # background_class: that class never comes out; score_activation: scores are logits, outputs probabilities
    logits = torch.logit(scores.clamp(1e-6, 1 - 1e-6))
    a = {**spm.NMS_ATTRIBUTES, "box_coding": 1}
    plain = spm.efficient_nms(boxes, scores, **a)
    activated = spm.efficient_nms(boxes, logits, **{**a, "score_activation": 1})
    assert torch.equal(plain[0], activated[0]) and torch.allclose(plain[2], activated[2], atol=1e-5)
    no_circles = spm.efficient_nms(boxes, scores, **{**a, "background_class": 0})
    assert (no_circles[3][no_circles[2] > 0] != 0).all() and (plain[3][plain[2] > 0] == 0).any()
    # per-class boxes [B, N, C, 4]: class c reads its own box
    per_class = boxes[:, :, None, :].repeat(1, 1, 3, 1)
    same = spm.efficient_nms(per_class, scores, **a)
    assert all(torch.equal(p, q) for p, q in zip(plain, same))
