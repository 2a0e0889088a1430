"""Issue 37 item 8, the seed case on the engine side: a plugin's share of the engine's time and the reformat/copy
layers next to it (`engine audit`), and the fusions a plugin cut (`engine diff` of builds with and without it).

The fixtures are real exports rewritten to hold a plugin (tests/data/engine_exports/plugin/make_plugin.py says how
and why: no engine with a plugin could be built or profiled here): the real FP16 ResNet export with an identity
plugin cutting `Conv_10 + Add_11 + Relu_12` (detailed layer info: the data flow is known), and the real U-ViT
`--dumpProfile` table with a plugin splitting its Myelin region (names only). The PointPillars profile is real as
it stands: its `PPScatter_0` is a plugin layer (trtexec ran with --plugins=libpointpillar_core.so)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import DATA, run_cli
from trtverify.engine.audit import audit
from trtverify.engine.diff import diff
from trtverify.engine.exports import EngineLayer, nodes_of
from trtverify.engine.plugins import found_by

EXPORTS = DATA / "engine_exports"
PLUGGED = EXPORTS / "plugin" / "fp16-plugin"
UVIT_PLUGGED = EXPORTS / "plugin" / "uvit-plugin.log"
LOGS = DATA / "trtexec_logs"
UVIT = LOGS / "08_trt86_profile_columns_uvit_trtllm2.log"
POINTPILLARS = LOGS / "07_trt861_profile_columns_pointpillars_blog.log"
COPY_MS, RELU_MS, CONV_MS = 0.107861, 0.080896, 0.054272  # make_plugin.py's times; the conv's is the real one
TO_PLUGIN = "Reformatting CopyNode for Input Tensor 0 to IdentityConv_0"
FROM_PLUGIN = "Reformatting CopyNode for Input Tensor 0 to PWN(Relu_12)"
REGION = "{ForeignNode[UViTNet/CONSTANT_8...UViTNet/ELEMENTWISE_DIV_0]}"
FIRST = "{ForeignNode[UViTNet/CONSTANT_8...UViTNet/nnet/mid_block/attn/SHUFFLE_2]}"
SECOND = "{ForeignNode[UViTNet/nnet/mid_block/attn/proj/MATRIX_MULTIPLY_0...UViTNet/ELEMENTWISE_DIV_0]}"
LLM_PLUGIN = "UViTNet/nnet/mid_block/attn/PLUGIN_V2_0"


def _names_only(tmp_path: Path) -> Path:
    """The plugin build as an export at --profilingVerbosity=layer_names_only writes it: `Layers` is a list of
    names (TensorRT 8.4+), the profile unchanged."""
    folder = tmp_path / "names"
    folder.mkdir()
    info = json.loads(next(PLUGGED.glob("*graph.json")).read_text())
    names = {"Layers": [layer["Name"] for layer in info["Layers"]], "Bindings": info["Bindings"]}
    (folder / "resnet-plugin.onnx.engine.graph.json").write_text(json.dumps(names))
    profile = next(PLUGGED.glob("*profile.json"))
    (folder / profile.name).write_text(profile.read_text())
    return folder


def test_audit_gives_the_plugin_its_share_and_the_copies_next_to_it():
    a = audit([PLUGGED])
    assert a.total_ms == pytest.approx(1.017 + 2 * COPY_MS + COPY_MS + RELU_MS, abs=5e-4)
    (p,) = a.plugins
    assert (p.name, p.type, p.found_by, p.plugin) == ("IdentityConv_0", "PluginV2", "layer type", None)
    assert p.avg_ms == COPY_MS and p.share == pytest.approx(COPY_MS / a.total_ms)
    # named for the plugin, and the one reading its output: told along the tensors of the detailed export
    assert [(n.name, n.side, n.by, n.type) for n in p.next_to] == [
        (TO_PLUGIN, "input", "name", "Reformat"),
        (FROM_PLUGIN, "output", "tensor", "Reformat"),
    ]
    assert p.next_to_ms == pytest.approx(2 * COPY_MS)
    assert p.share_with_next_to == pytest.approx(3 * COPY_MS / a.total_ms)
    (f,) = [f for f in a.findings if f.kind == "plugins"]
    assert f.severity == "medium" and f.layers == ["IdentityConv_0", TO_PLUGIN, FROM_PLUGIN]
    assert f.message.startswith("1 plugin layer (IdentityConv_0) takes 0.108 ms, 7.6% of the engine's time; the 2 "
                                "reformat/copy layers next to it 0.216 ms (15.2%)")  # fmt: skip


def test_a_names_only_export_tells_the_plugin_by_the_name_given(tmp_path: Path):
    folder = _names_only(tmp_path)
    bare = audit([folder])
    assert bare.plugins == [] and "plugins" not in {f.kind for f in bare.findings}  # nothing says it is one
    a = audit([folder], plugins=["IdentityConv"])  # the op_type matches the node name IdentityConv_0
    (p,) = a.plugins
    assert (p.name, p.type, p.found_by, p.plugin, p.avg_ms) == ("IdentityConv_0", "unknown", "--plugin",
                                                                "IdentityConv", COPY_MS)  # fmt: skip
    # no tensor names: the copy after it is told by the layer order
    assert [(n.name, n.side, n.by) for n in p.next_to] == [(TO_PLUGIN, "input", "name"),
                                                           (FROM_PLUGIN, "output", "order")]  # fmt: skip
    assert audit([folder], plugins=["IdentityConv_0"]).plugins[0].name == "IdentityConv_0"  # the layer name
    assert audit([folder], plugins=["Identity*"]).plugins[0].name == "IdentityConv_0"  # a glob
    assert audit([folder], plugins=["Identity"]).plugins == []  # a prefix is not a name


def test_a_real_profile_table_with_a_plugin_layer_pointpillars():
    """trtexec ran with --plugins=libpointpillar_core.so; the table names the plugin layer PPScatter_0 only."""
    a = audit([POINTPILLARS], plugins=["PPScatter"])
    (p,) = a.plugins
    assert (p.name, p.avg_ms, p.next_to) == ("PPScatter_0", 0.0913, [])
    assert round(100 * p.share, 1) == 5.7  # trtexec's own Time(%) column says 5.7
    (f,) = [f for f in a.findings if f.kind == "plugins"]
    assert "no reformat/copy layer next to it" in f.message and f.severity == "info"


def test_diff_names_the_fusion_the_plugin_cut_and_what_it_costs():
    d = diff([EXPORTS / "fp16"], [PLUGGED])
    (cut,) = d.fusion_cuts
    assert (cut.plugins, cut.plugin_build, cut.fused) == (["IdentityConv_0"], "B", ["Conv_10 + Add_11 + Relu_12"])
    assert cut.pieces == ["Conv_10 + Add_11", "PWN(Relu_12)"] and (cut.myelin, cut.by) == (False, "tensor")
    assert cut.fused_ms == pytest.approx(CONV_MS)  # with the (NoOp, 0 ms) copy node into it
    assert cut.cut_ms == pytest.approx(CONV_MS + 3 * COPY_MS + RELU_MS) and cut.copies == 3
    assert cut.delta_ms == pytest.approx(3 * COPY_MS + RELU_MS)
    kinds = {f.kind: f for f in d.findings}
    assert kinds["fusion_cut"].severity == "medium"
    assert kinds["fusion_cut"].message == (
        "IdentityConv_0 in B cuts A's fused layer Conv_10 + Add_11 + Relu_12 into 2: Conv_10 + Add_11 | "
        "PWN(Relu_12); 0.054 ms in A -> 0.459 ms in B with the plugin and 3 reformat/copy layers (+0.404 ms)"
    )
    assert kinds["plugins"].message.startswith("plugin layers 0 -> 1: IdentityConv_0 only in B (0.108 ms")
    # the other way round: the build with the plugin is A
    back = diff([PLUGGED], [EXPORTS / "fp16"]).fusion_cuts
    assert [(c.plugin_build, c.fused, c.pieces) for c in back] == [("A", cut.fused, cut.pieces)]


def test_diff_of_names_only_builds_tells_the_cut_by_layer_order(tmp_path: Path):
    folder = _names_only(tmp_path)
    assert diff([EXPORTS / "fp16"], [folder]).fusion_cuts == []  # the plugin is not known: no cut claimed
    (cut,) = diff([EXPORTS / "fp16"], [folder], plugins=["IdentityConv"]).fusion_cuts
    assert (cut.by, cut.pieces) == ("order", ["Conv_10 + Add_11", "PWN(Relu_12)"])
    assert cut.delta_ms == pytest.approx(3 * COPY_MS + RELU_MS)


def test_a_myelin_region_split_by_a_plugin_known_by_its_name():
    a = audit([UVIT_PLUGGED])
    (p,) = a.plugins
    assert (p.name, p.found_by, p.plugin, p.avg_ms) == (LLM_PLUGIN, "name", "PLUGIN_V2", 0.0105)
    assert [(n.side, n.by, n.avg_ms) for n in p.next_to] == [("input", "name", 0.9871), ("output", "name", 0.9871)]
    d = diff([UVIT], [UVIT_PLUGGED])
    (cut,) = d.fusion_cuts
    assert (cut.fused, cut.pieces, cut.myelin, cut.by) == ([REGION], [FIRST, SECOND], True, "order")
    region_copies = 0.0409 + 0.0795 + 0.0052 + 0.0049 + 0.0048 + 0.0046 + 0.0047  # its 7 input reformats
    assert cut.fused_ms == pytest.approx(81.6096 + region_copies + 0.0049)
    assert cut.cut_ms == pytest.approx(40.1904 + 45.8113 + region_copies + 0.0049 + 0.0105 + 2 * 0.9871)
    (f,) = [f for f in d.findings if f.kind == "fusion_cut"]
    assert f.message.startswith(f"{LLM_PLUGIN} in B cuts A's Myelin region {REGION} into 2: {FIRST} | {SECOND}")
    assert f.message.endswith("(+6.377 ms) (told by layer order: the export names no tensors)")


def test_a_tensorrt_10_myelin_graph_split_by_a_plugin_v3(tmp_path: Path):
    """The real TensorRT 10.16 detailed listing (Myelin kernels `..._myl4_k`, ONNX nodes in Metadata), rewritten:
    a PluginV3 layer after the graph's first kernel, the kernels after it a Myelin graph of their own."""
    log = LOGS / "11_trt1016_layerinfo_detailed_cookbook.log"
    lines = log.read_text().split("\n")  # not splitlines(): Metadata separates nodes with U+001E
    at = next(i for i, line in enumerate(lines) if line.startswith("Name: node_linear_myl4_0,"))
    plugin = ("Name: node_custom, LayerType: PluginV3, Inputs: [ { Name: relu_2.1_myl4, Dimensions: [1,1024], "
              "Format/Datatype: Float }], Outputs: [ { Name: custom_out, Dimensions: [1,1024], Format/Datatype: "
              "Float }], TacticName: , StreamId: 0, Metadata: [ONNX Layer: node_custom]")  # fmt: skip
    after = [line.replace(f"_myl4_{k}", f"_myl6_{k - 1}") for k, line in enumerate(lines[at + 1 : at + 5], 1)]
    (tmp_path / "plugged.log").write_text("\n".join(lines[: at + 1] + [plugin] + after + lines[at + 5 :]))
    a = audit([tmp_path / "plugged.log"])
    assert [(p.name, p.type, p.found_by) for p in a.plugins] == [("node_custom", "PluginV3", "layer type")]
    (cut,) = diff([log], [tmp_path / "plugged.log"]).fusion_cuts
    assert cut.myelin and cut.by == "order" and cut.fused_ms is None and cut.delta_ms is None
    assert cut.fused[0] == "node_linear_myl4_0" and len(cut.fused) == 5  # the graph's five kernels, one unit
    assert cut.pieces[0] == "node_linear_myl4_0" and cut.pieces[1:] == [
        "__myl_MulSum_myl6_0", "__myl_AddMaxrSubExpSum_myl6_1", "__myl_DivMulMaxr_myl6_2", "__myl_CastReshCast_myl6_3"
    ]  # fmt: skip


def test_no_plugin_no_noise():
    for build in ("fp32", "fp16", "qat", "qat-residual", "qat-residual-qgap", "trt11"):
        a = audit([EXPORTS / build])
        assert a.plugins == [] and "plugins" not in {f.kind for f in a.findings}, build
    d = diff([EXPORTS / "fp16"], [EXPORTS / "qat"])
    assert d.fusion_cuts == [] and not {"plugins", "fusion_cut"} & {f.kind for f in d.findings}
    assert diff([UVIT], [LOGS / "06_trt852_profile_old_median_haxconn.log"]).fusion_cuts == []
    for args in (("audit", str(EXPORTS / "qat")), ("diff", str(EXPORTS / "fp16"), "--vs", str(EXPORTS / "qat"))):
        r = run_cli("engine", *args)
        assert r.code == 0 and "plugin" not in (r.out + r.err).lower() and "fusion" not in r.out, r.out


@pytest.mark.parametrize(
    ("name", "ltype", "expected"),
    [
        ("(Unnamed Layer* 0) [PluginV2DynamicExt]", "unknown", ("name", "PluginV2DynamicExt")),
        ("/model.22/EfficientNMS_TRT", "unknown", ("name", "EfficientNMS_TRT")),
        ("EfficientNMS_TRT_276", "unknown", ("name", "EfficientNMS_TRT")),
        ("BatchedNMSDynamic_TRT", "unknown", ("name", "BatchedNMSDynamic_TRT")),
        ("TRTBatchedNMS_0", "unknown", ("name", "TRTBatchedNMS")),
        ("GPTLMHeadModel/layers/0/attention/PLUGIN_V2_0", "unknown", ("name", "PLUGIN_V2")),
        ("/end2end/EfficientNMS_TRT", "PluginV2", ("layer type", "EfficientNMS_TRT")),
        ("my_layer", "PluginV3", ("layer type", None)),
        ("Reformatting CopyNode for Input Tensor 0 to /end2end/EfficientNMS_TRT", "Reformat", None),
        ("Reformatting CopyNode for Input Tensor 0 to EfficientNMS_TRT_276", "unknown", None),
        ("Conv_3 + Relu_4", "CaskConvolution", None),
        ("{ForeignNode[/model/Conv...EfficientNMS_TRT_1]}", "Myelin", None),
        ("MyPluginOp_3", "unknown", None),  # a user's plugin: only --plugin tells
    ],
)
def test_which_layers_are_plugin_layers(name: str, ltype: str, expected: tuple | None):
    m = __import__("re").match(r"^Reformatting CopyNode for (?:Input|Output) Tensor \d+ to (.+)$", name)
    layer = EngineLayer(name, ltype, None, nodes_of(m.group(1) if m else name), reformat=ltype == "Reformat")
    assert found_by(layer) == expected


def test_a_plugin_trtverify_has_a_reference_for_is_known_by_name(monkeypatch: pytest.MonkeyPatch):
    from trtverify.plugins import registry

    layer = EngineLayer("/head/MyDecode_7", "unknown", None, ["/head/MyDecode_7"])
    assert found_by(layer) is None
    monkeypatch.setitem(registry.BUILTIN, "MyDecode", "some.module:decode")
    assert found_by(layer) == ("name", "MyDecode")


def test_pointwise_layer_names_give_their_onnx_nodes():
    """TensorRT 8 names fused pointwise layers PWN(...) (a real one, from a YOLOv5 INT8 build log in
    tests/data/buildlogs); their nodes line builds up in engine diff."""
    name = "/model.0/conv/Conv + PWN(PWN(/model.0/act/Sigmoid), /model.0/act/Mul)"
    assert nodes_of(name) == ["/model.0/conv/Conv", "/model.0/act/Sigmoid", "/model.0/act/Mul"]
    assert nodes_of("PWN(Relu_12)") == ["Relu_12"]


def test_commands_print_and_export_the_plugin_and_the_cut():
    r = run_cli("engine", "audit", str(PLUGGED))
    assert r.code == 0, r.err
    assert "plugin layers:\n  IdentityConv_0 (PluginV2; found by layer type): 0.108 ms, 7.6% of the time; 0.324 ms, " \
           "22.8% with the reformat/copy layers next to it\n" in r.out  # fmt: skip
    assert f"    input:  {TO_PLUGIN} (Reformat) 0.108 ms\n    output: {FROM_PLUGIN} (Reformat) 0.108 ms" in r.out
    data = json.loads(run_cli("engine", "audit", str(PLUGGED), "--json").out)
    assert set(data["plugins"][0]) == {"name", "type", "plugin", "found_by", "avg_ms", "share", "next_to",
                                       "next_to_ms", "share_with_next_to"}  # fmt: skip
    r = run_cli("engine", "diff", str(EXPORTS / "fp16"), "--vs", str(PLUGGED), "--json")
    assert r.code == 0 and json.loads(r.out)["fusion_cuts"][0]["pieces"] == ["Conv_10 + Add_11", "PWN(Relu_12)"]
    r = run_cli("engine", "audit", str(POINTPILLARS), "--plugin", "PPScatter", "--plugin", "NoSuchOp")
    assert r.code == 0 and "PPScatter_0 (PPScatter; found by --plugin): 0.091 ms, 5.7% of the time" in r.out
    assert "note: --plugin NoSuchOp matches no engine layer" in r.err
    r = run_cli("engine", "diff", str(UVIT), "--vs", str(UVIT_PLUGGED))
    assert r.code == 0 and f"[medium] fusion_cut: {LLM_PLUGIN} in B cuts A's Myelin region" in r.out


def test_schema_documents_the_new_keys():
    schemas = json.loads(run_cli("schema", "--engine").out)
    assert "plugins" in schemas["audit"]["properties"] and "fusion_cuts" in schemas["diff"]["properties"]
