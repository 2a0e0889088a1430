"""The message-family rules (trtverify/buildlog/families.py and the extended rules of findings.py).

Three kinds of cases:
- dev logs of the corpus (tests/data/logcorpus, `dev` in SPLIT.txt only): the values were read by eye from the
  log named in each test, not produced by the parser;
- synthetic lines: other TensorRT versions' and wrappers' wordings of the same family, written for these tests
  (they are NOT copied from real logs; each says which version or tool it imitates);
- hypothesis: the rules never raise on random text, nor on dev logs with lines deleted or duplicated.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trtverify.buildlog import families
from trtverify.buildlog.findings import RULES, Finding
from trtverify.buildlog.lines import split_records
from trtverify.buildlog.parser import parse, parse_file

CORPUS = Path(__file__).resolve().parents[1] / "data" / "logcorpus"
DEV = [
    line.split("\t", 1)[1].strip()
    for line in (CORPUS / "SPLIT.txt").read_text(encoding="utf-8").splitlines()
    if line.startswith("dev\t")
]


def _dev(prefix: str) -> Path:
    (rel,) = [d for d in DEV if d.startswith(prefix)]  # only dev logs are ever opened here
    return CORPUS / rel


def _one(findings: list[Finding], kind: str) -> Finding:
    (f,) = [f for f in findings if f.kind == kind]
    return f


def _kinds(text: str) -> set[str]:
    return {f.kind for f in parse(text).findings}


# --- dev logs, values read from the log ------------------------------------------------------


def test_dla_layers_wrapped_trt7_listing() -> None:  # b/017_jetson_dla_layers_running_wrapped_tensorrtdemos200.log
    f = _one(parse_file(_dev("b/017")).findings, "dla_layers")
    dla = f.detail["dla"]
    assert f.lines == (1,) and f.layers == () and f.detail["gpu"] == []
    # 7 complete subgraphs of 6 layers, and the cut 8th: 056 tanh, 056 mish, 057 conv (`057_convol` is cut)
    assert len(dla) == 45
    assert dla[:3] == ["002_convolutional_tanh", "002_convolutional_mish", "003_convolutional"]
    assert "013_convolutional" in dla and "016_convolutional" in dla and "026_convolutional_tanh" in dla
    assert "055_convolutional_mish" in dla  # wrapped as `055_convolu` / `tional_mish`
    assert dla[-3:] == ["056_convolutional_tanh", "056_convolutional_mish", "057_convolutional"]


def test_dla_fallback_trt85_switching_wording() -> None:  # a/032_trtexec_dla_placement_unsupported_dlatutorial3.log
    f = _one(parse_file(_dev("a/032")).findings, "dla_fallback")
    assert f.count == 9 and f.lines == tuple(range(1, 10))
    assert f.layers[:2] == ("/model.24/Constant_1_output_0", "(Unnamed Layer* 277) [Shuffle]")
    assert f.layers[-1] == "(Unnamed Layer* 288) [Shuffle]"


def test_dla_fallback_validation_and_reasons() -> None:  # b/002_ultralytics_dla_unsupported_validation_ultralytics23488
    findings = parse_file(_dev("b/002")).findings
    fb = _one(findings, "dla_fallback")
    assert fb.lines == (1, 3, 5, 6, 8, 10)
    assert fb.layers == (
        "(Unnamed Layer* 481) [Constant]",
        "/model.23/Expand_1",
        "/model.23/Tile_1",
        "/model.23/GatherElements_1",
        "/model.23/Concat_6",
        "/model.10/m/m.0/attn/Reshape",
    )
    reasons = _one(findings, "dla_unsupported")
    assert reasons.lines == (2, 4, 7, 9)
    assert reasons.layers == ("/model.23/Expand_1", "/model.23/Tile_1", "/model.23/Concat_6")


def test_dla_garbled_timestamps_and_precision_switch() -> None:  # a/033_trtexec_dla_placement_garbled_timestamps
    findings = parse_file(_dev("a/033")).findings
    fb = _one(findings, "dla_fallback")
    assert fb.count == 7 and fb.layers[0] == "Transpose__560" and fb.layers[-1] == "(Unnamed Layer* 39) [Shape]"
    assert _one(findings, "dla_unsupported").layers == ("shuffle_netv2/shufflenet_stage/shufflenet_unit1/concat",)


@pytest.mark.parametrize(
    ("prefix", "count", "first", "plugin", "version"),
    [
        ("a/010", 1, 2, "Round", "1"),  # trtexec, `getPluginCreator could not find plugin: Round version: 1`
        ("b/019", 3, 2, "TRTBatchedNMS", "1"),  # mmdeploy: TRT error + 2 parser assertions
        ("b/020", 3, 1, "TRTBatchedNMS", "1"),  # `INVALID_ARGUMENT: getPluginCreator ... TRTBatchedNMS version 1`
        ("b/031", 2, 2, "DETECT_TRT", "1.0"),  # DeepStream: not found + IPluginCreator not found on deserialize
        ("b/008", 1, 1, "OneHot", "1"),  # ONNX Runtime TensorRT EP
    ],
)
def test_plugin_not_found(prefix: str, count: int, first: int, plugin: str, version: str) -> None:
    f = _one(parse_file(_dev(prefix)).findings, "plugin_not_found")
    assert (f.count, f.lines[0], f.severity) == (count, first, "high")
    assert f.layers == (plugin,)
    assert f.detail["plugin"] == plugin and f.detail["version"] == version


def test_plugin_not_found_named_from_parsing_node() -> None:  # a/011_onnx2trt_plugin_missing_scatterbev
    f = _one(parse_file(_dev("a/011")).findings, "plugin_not_found")
    # line 2: `Could not register plugin creator -  ::PillarScatterPlugin version 1`; line 12: the assertion
    # (its `[8] ...` line 13 continues the `ERROR: ... In function` line),
    # whose plugin is the op of `While parsing node number 4 [ScatterBEV -> "479"]`, and whose node is the one the
    # parser's node dump names (`name: "onnx_graphsurgeon_node_0"` between `--- Begin node ---` and `--- End node ---`)
    assert f.lines == (2, 12) and f.layers == ("PillarScatterPlugin", "ScatterBEV", "onnx_graphsurgeon_node_0")
    assert f.detail["occurrences"][1]["node"] == "onnx_graphsurgeon_node_0"


def test_strongly_typed_rtx_fp16_flag() -> None:  # a/016_rtx_strongly_typed_fp16_flag_rtx2.log
    f = _one(parse_file(_dev("a/016")).findings, "strongly_typed_usage")
    assert f.lines == (1,) and f.severity == "high" and f.detail == {"flag": "FP16"}


def test_build_time_polygraphy() -> None:  # a/028: `[I] Finished engine building in 12.280 seconds` (line 7)
    f = _one(parse_file(_dev("a/028")).findings, "build_time")
    assert f.lines == (7,) and f.detail == {"seconds": pytest.approx(12.28)}


def test_calibration_cache_with_header() -> None:  # b/023_ultralytics_calibration_cache_entropy2
    f = _one(parse_file(_dev("b/023")).findings, "calibration_cache_contents")
    assert f.lines == (1,)
    d = f.detail
    assert (d["header"], d["version"], d["calibrator"], d["tensors"]) == (
        "TRT-8601-EntropyCalibration2",
        "8.6.1",
        "EntropyCalibration2",
        51,
    )
    assert d["first"][0] == "images" and d["first"][1] == pytest.approx(0.0035237, rel=1e-4)  # 0x3b66eddc


def test_calibration_cache_without_header() -> None:  # a/030_trt-cpp_calibration_cache_unnamed_itensors
    f = _one(parse_file(_dev("a/030")).findings, "calibration_cache_contents")
    assert f.detail["header"] is None and f.detail["tensors"] == 11
    assert f.detail["first"][0] == "(Unnamed ITensor* 38)"
    assert f.detail["first"][1] == pytest.approx(0.01111, rel=1e-3)  # 0x3c3604b4


def test_tftrt_native_segment() -> None:  # b/004 (engine creation failed) and b/007 (retry with native segment)
    f = _one(parse_file(_dev("b/004")).findings, "tftrt_native_segment")
    assert f.lines == (1,) and f.layers == ("TRTEngineOp_22",) and f.severity == "medium"
    f = _one(parse_file(_dev("b/007")).findings, "tftrt_native_segment")
    assert f.lines == (2,) and f.layers[0].endswith("ClipToWindow_63/TRTEngineOp_81")


def test_tftrt_ops_not_converted_and_segments() -> None:  # b/006: 70 ops of 7 types, 17 candidate segments
    f = _one(parse_file(_dev("b/006")).findings, "tftrt_native_segment")
    assert f.lines == (1, 2) and f.detail["segments"] == 17 and f.detail["ops_not_converted"] == 70
    assert f.layers == ("Identity", "Placeholder", "NoOp", "Pack", "Shape", "StridedSlice", "Reshape")


def test_ort_trt_ep_plugin_message_reported_once() -> None:  # b/008: getPluginCreator ... OneHot, in ORT's log
    kinds = [f.kind for f in parse_file(_dev("b/008")).findings]
    assert kinds == ["plugin_not_found"]  # a missing plugin is plugin_not_found's, not also ort_trt_ep_unsupported


def test_layernorm_node_list_on_next_verbose_line() -> None:  # a/005_trt-python_fp16_layernorm_nodelist
    f = _one(parse_file(_dev("a/005")).findings, "layernorm_fp16")
    assert f.lines == (1, 3) and len(f.layers) == 9
    assert f.layers[0] == "/image_encoder/norm/ReduceMean" and f.layers[-1] == "/image_encoder/norm/Add_1"


def test_no_implementation_foreign_node() -> None:  # b/022 (prefix lost) and a/008 (Error[10] twice)
    assert _one(parse_file(_dev("b/022")).findings, "no_implementation").layers == (
        "{ForeignNode[Flatten_972...Slice_1023]}",
    )
    f = _one(parse_file(_dev("a/008")).findings, "no_implementation")
    assert f.lines == (2, 3) and f.layers[0].endswith("/model.10/attn/Add")


def test_calibration_profile_warning() -> None:  # b/024 line 15: `Calibration Profile is not defined. ... Profile 0`
    f = _one(parse_file(_dev("b/024")).findings, "calibration_progress")
    assert f.lines == (15,) and f.detail == {"profile": 0}


# --- synthetic wordings of other versions and wrappers (written for these tests) ----------------


def test_synthetic_dla_listing_trt8_items() -> None:  # TensorRT 8.4+ style `[DlaLayer]` / `[GpuLayer] TYPE: name`
    text = (
        "[I] [TRT] ---------- Layers Running on DLA ----------\n"
        "[I] [TRT] [DlaLayer] {ForeignNode[conv1...relu5]}\n"
        "[I] [TRT] ---------- Layers Running on GPU ----------\n"
        "[I] [TRT] [GpuLayer] SHUFFLE: (Unnamed Layer* 12) [Shuffle]\n"
        "[I] [TRT] [GpuLayer] SOFTMAX: prob\n"
        "[I] [TRT] Total Activation Memory: 1024\n"
    )
    f = _one(parse(text).findings, "dla_layers")
    assert f.detail == {"dla": ["{ForeignNode[conv1...relu5]}"], "gpu": ["(Unnamed Layer* 12) [Shuffle]", "prob"]}
    assert f.layers == ("(Unnamed Layer* 12) [Shuffle]", "prob") and f.lines == (1,)


def test_synthetic_dla_listing_empty_dla_is_not_a_finding() -> None:  # every TRT 8.4+ GPU build prints this
    text = "[I] [TRT] ---------- Layers Running on DLA ----------\n"
    text += "[I] [TRT] ---------- Layers Running on GPU ----------\n"
    text += "[I] [TRT] [GpuLayer] CONVOLUTION: conv1\n"
    assert "dla_layers" not in _kinds(text)


def test_synthetic_dla_listing_trt7_gpu_list() -> None:  # TensorRT 7 Python logger, comma-separated lists
    text = (
        "[TensorRT] INFO: --------------- Layers running on DLA: \n"
        "[TensorRT] INFO: {conv1,relu1}, {conv2,relu2}, \n"
        "[TensorRT] INFO: --------------- Layers running on GPU: \n"
        "[TensorRT] INFO: (Unnamed Layer* 7) [Shuffle], yolo_1, \n"
    )
    f = _one(parse(text).findings, "dla_layers")
    assert f.detail["dla"] == ["conv1", "relu1", "conv2", "relu2"]
    assert f.layers == ("(Unnamed Layer* 7) [Shuffle]", "yolo_1")


@pytest.mark.parametrize(
    ("line", "layer"),
    [
        ("WARNING: Default DLA is enabled but layer fc1 is not running on DLA, falling back to GPU.", "fc1"),  # TRT 6
        ("[W] [TRT] Layer 'pool5' (POOLING) is not supported on DLA, falling back to GPU.", "pool5"),  # quoted form
        (
            "WARNING: [TRT]: Layer 'conv9' (CONVOLUTION): Unsupported on DLA. "
            "Switching this layer's device type to GPU.",
            "conv9",
        ),  # DeepStream, 8.5+
        ("[TRT] [W] Validation failed for DLA layer: head/Reshape. Switching to GPU fallback.", "head/Reshape"),
    ],
)
def test_synthetic_dla_fallback(line: str, layer: str) -> None:
    assert _one(parse(line + "\n").findings, "dla_fallback").layers == (layer,)


@pytest.mark.parametrize(
    ("line", "plugin", "version"),
    [
        (
            "[E] [TRT] IPluginRegistry::getCreator: Error Code 4: API Usage Error (Cannot find plugin: Foo_TRT, "
            "version: 2, namespace:.)",
            "Foo_TRT",
            "2",
        ),  # TensorRT 10 wording  # fmt: skip
        ("[TRT] [E] 3: getPluginCreator could not find plugin: MyNMS version: 1", "MyNMS", "1"),  # Python logger
        ("ERROR: [Torch-TensorRT] - Failed to create plugin: Gelu", "Gelu", None),  # Torch-TensorRT style
    ],
)
def test_synthetic_plugin_not_found(line: str, plugin: str, version: str | None) -> None:
    f = _one(parse(line + "\n").findings, "plugin_not_found")
    assert f.layers == (plugin,) and f.detail.get("version") == version


def test_synthetic_plugin_assertion_takes_searching_name() -> None:  # TRT 8.x parser: search, then assertion
    text = (
        "[I] [TRT] No importer registered for op: DCNv2. Attempting to import as plugin.\n"
        "[I] [TRT] Searching for plugin: DCNv2, plugin_version: 1, plugin_namespace: \n"
        '[E] [TRT] ModelImporter.cpp:773: Assertion failed: creator && "Plugin not found, are the plugin name, '
        'version, and namespace correct?"\n'
    )
    f = _one(parse(text).findings, "plugin_not_found")
    assert f.layers == ("DCNv2",) and f.lines == (3,) and f.detail["version"] == "1"


def test_synthetic_strongly_typed_and_weak_typing() -> None:
    strong = (
        "[E] [TRT] ILayer::setPrecision: Error Code 3: API Usage Error (Parameter check failed, condition: "
        "!mNetwork.isStronglyTyped(). Cannot set layer precision in a strongly typed network.)\n"
    )  # TensorRT 10-style wording
    assert "strongly_typed_usage" in _kinds(strong)
    info = "[I] [TRT] Network is strongly typed.\n"  # not a misuse
    assert "strongly_typed_usage" not in _kinds(info)
    weak = [
        "[W] --fp16 is deprecated; use a strongly typed network with explicit types instead.\n",  # trtexec 10.x
        "[TRT] [W] BuilderFlag::kINT8 is deprecated. Weakly typed networks will be removed.\n",  # Python logger
        "# python warning: DeprecationWarning: Use Deprecated in TensorRT 10.1. Superseded by explicit "
        "quantization. instead. (int8_calibrator) (build.py:42)\n",
    ]
    for w in weak:
        assert "weak_typing_deprecated" in _kinds(w), w
    assert "weak_typing_deprecated" not in _kinds("[W] [TRT] The getMaxBatchSize() function is deprecated.\n")


@pytest.mark.parametrize(
    ("line", "seconds"),
    [
        ("[11/01/2024-10:32:57] [I] Engine built in 8.69986 sec.", 8.69986),  # trtexec 8.x-10.x
        ("[TRT] [I] Engine generation completed in 3.5 seconds.", 3.5),  # Python logger
        ("INFO:torch_tensorrt.dynamo.conversion._TRTInterpreter:Build TRT engine elapsed time: 0:01:02.500000", 62.5),
        ("[I] Finished engine building in 457.124 seconds", 457.124),  # Polygraphy
    ],
)
def test_synthetic_build_time(line: str, seconds: float) -> None:
    assert _one(parse(line + "\n").findings, "build_time").detail["seconds"] == pytest.approx(seconds)


def test_synthetic_calibration_cache_trt10_header_and_no_false_positive() -> None:
    text = "TRT-100300-EntropyCalibration2\ninput:0: 3c010a14\nconv1: 0\n"  # a TF-style name with a colon
    d = _one(parse(text).findings, "calibration_cache_contents").detail
    assert d["version"] == "10.3.0" and d["tensors"] == 2 and d["first"][0] == "input:0"
    scratch = "Tactic 2 scratch requested: 301989888, available: 16777216\n" * 3  # TensorRT 5 timing lines
    assert "calibration_cache_contents" not in _kinds(scratch)


def test_synthetic_tftrt_and_ort() -> None:
    tf = (
        "2021-03-01 10:00:00.000001: W tensorflow/compiler/tf2tensorrt/kernels/trt_engine_op.cc:1100] "
        "TF-TRT Warning: Engine retrieval for input shapes: [[1,224,224,3]] failed. Running native segment for "
        "PartitionedCall/TRTEngineOp_0_0\n"
    )  # TF 2.4+ wording
    assert _one(parse(tf).findings, "tftrt_native_segment").layers == ("PartitionedCall/TRTEngineOp_0_0",)
    ort = (
        "2024-01-01 00:00:00.0 [W:onnxruntime:Default, tensorrt_execution_provider.cc:2120 GetCapability] "
        "[TensorRT EP] No graph will run on TensorRT execution provider\n"
    )
    assert "ort_trt_ep_unsupported" in _kinds(ort)


def test_synthetic_missing_scale_trt7_and_no_implementation_trt7_10() -> None:
    trt7 = "[W] [TRT] Missing dynamic range for tensor 123, expect fall back to non-int8 implementation for any layer\n"
    assert _one(parse(trt7).findings, "missing_scale").layers == ("123",)
    old = (
        "[E] [TRT] Internal error: could not find any implementation for node conv1 + relu1, try increasing the "
        "workspace size with IBuilder::setMaxWorkspaceSize()\n"
    )  # TensorRT 7 wording
    assert _one(parse(old).findings, "no_implementation").layers == ("conv1 + relu1",)
    new = (
        "[E] Error[10]: IBuilder::buildSerializedNetwork: Error Code 10: Internal Error (Could not find any "
        "implementation for node /m/Conv. In computeCosts at optimizer/common/tactic/optimizer.cpp:4115)\n"
    )  # TensorRT 10 wording
    assert _one(parse(new).findings, "no_implementation").layers == ("/m/Conv",)
    ln = "[W] [TRT] Running layernorm after self-attention with FP16 Reduce or Pow may cause overflow.\n"  # 10.x
    assert "layernorm_fp16" in _kinds(ln)


# --- robustness ------------------------------------------------------------------------------

_ALL = RULES + families.RULES


def _run_rules(text: str) -> None:
    records = split_records(text)
    for rule in _ALL:
        list(rule(records))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=400))
def test_rules_never_raise_on_random_text(text: str) -> None:
    _run_rules(text)


_PIECES = st.sampled_from(
    [
        "Layers running on DLA:",
        "---------- Layers Running on GPU ----------",
        "[I] [TRT] [GpuLayer] X: ",
        "{a,b",
        "}, {",
        "TRT-8601-EntropyCalibration2",
        "x: 3c010a14",
        "getPluginCreator could not find plugin",
        "Plugin not found, are the plugin name, version, and namespace correct?",
        "Build TRT engine elapsed time: 1:",
        "Detected layernorm nodes in FP16",
        "Number of TensorRT candidate segments: ",
        "\n",
        " ",
        ",",
    ]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(_PIECES, st.text(max_size=8)), max_size=40))
def test_rules_never_raise_on_family_fragments(parts: list[str]) -> None:
    _run_rules("".join(parts))


_DEV_TEXTS = [(CORPUS / rel).read_bytes().decode("utf-8", errors="replace") for rel in DEV]


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(_DEV_TEXTS), st.lists(st.tuples(st.booleans(), st.integers(0, 200)), max_size=12))
def test_rules_never_raise_on_mutilated_dev_logs(text: str, edits: list[tuple[bool, int]]) -> None:
    lines = text.split("\n")
    for delete, at in edits:
        if not lines:
            break
        i = at % len(lines)
        if delete:
            del lines[i]
        else:
            lines.insert(i, lines[i])
    _run_rules("\n".join(lines))
    parse("\n".join(lines))
