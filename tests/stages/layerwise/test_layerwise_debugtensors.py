"""trtexec's debug tensors as a captured candidate, end to end through `trtverify capture` and `trtverify layerwise
--captured`, on the demo's Fashion-MNIST CNN (demo/fp16_repair/make_demo.py: torch.onnx.export defaults, so ONNX
tensor names like /features/block2/conv/Conv_output_0).

trtexec cannot run here (no GPU): the tensor values are the model's own, computed by ONNX Runtime on the kit's feed,
and written in the layouts of TensorRT's samples/common/debugTensorWriter.cpp (the writers of
tests/toolout/test_debugtensors.py, which cite the functions): what `trtexec --markUnfusedTensorsAsDebugTensors
--saveAllDebugTensors=numpy|summary` leaves in its folder. The layer information is laid out as the real
`--exportLayerInfo` of tests/data/engine_exports (TensorRT's fused Conv + Relu layers, `Metadata` naming the ONNX
nodes as TensorRT 10 writes it).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests.conftest import ROOT, main_in_process
from tests.stages.layerwise.test_layerwise_captured import REF, candidate, layerwise
from tests.toolout.test_debugtensors import summary_text, write_npy
from trtverify.toolout.debugtensors import safe_name

PLANTED = "/features/block2/conv/Conv_output_0"


class _Cap:  # a capsys stand-in for the module-scoped fixture
    def readouterr(self):  # noqa: ANN201
        return type("C", (), {"out": "", "err": ""})()


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("kit")
    mp = pytest.MonkeyPatch()
    try:
        assert main_in_process(["capture", str(REF), "--out", str(folder)], _Cap(), mp).code == 0
    finally:
        mp.undo()
    return folder


@pytest.fixture(scope="module")
def tensors(kit: Path) -> dict[str, np.ndarray]:
    """Every node output of the reference on the kit's feed, in the graph's order (ONNX Runtime, all marked)."""
    model = onnx.load(REF)
    names = [o for n in model.graph.node for o in n.output if n.op_type != "Identity"]
    del model.graph.output[:]
    model.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {"input": np.load(kit / "inputs.npz")["input"][:1]}
    return dict(zip(names, sess.run(names, feed)))


def numpy_capture(folder: Path, tensors: dict[str, np.ndarray], names: dict[str, str] | None = None) -> None:
    """`--saveAllDebugTensors=numpy`: NNNN_<safe name>.npy per debug tensor, two enqueues (trtexec's warm-up too)."""
    folder.mkdir(parents=True)
    items = list(tensors.items())
    for k, (name, arr) in enumerate(items + items):
        write_npy(folder / f"{k:04d}_{safe_name((names or {}).get(name, name))}.npy", arr)


def test_numpy_debug_tensors_pass_and_a_planted_difference_is_found(kit, tensors, tmp_path, capsys, monkeypatch):
    readme = (kit / "README.md").read_text()  # the kit says how: trtexec writes into the folder it runs in
    assert "(cd captured/debug && trtexec --onnx=../../../fashion_bn_fp32.onnx" in readme
    assert "--markUnfusedTensorsAsDebugTensors --saveAllDebugTensors=numpy,summary" in readme
    numpy_capture(kit / "debug", tensors)
    code, results, text = layerwise(["--captured", str(kit / "debug")], tmp_path / "a", capsys, monkeypatch)
    assert code == 0, text
    c = candidate(results)
    assert {r["tensor"] for r in c["rows"]} == set(tensors)  # '/' made '_' by trtexec, named back
    assert "trtexec-debug" in c["emulation"] and "2 enqueues written, the first read" in c["emulation"]
    planted = dict(tensors)
    planted[PLANTED] = tensors[PLANTED] * np.float32(1.5)
    numpy_capture(kit / "debug_planted", planted)
    code, results, text = layerwise(["--captured", str(kit / "debug_planted")], tmp_path / "b", capsys, monkeypatch)
    assert code == 1, text
    assert candidate(results)["first_divergence"]["tensor"] == PLANTED


def test_summary_statistics_are_compared_as_statistics(kit, tensors, tmp_path, capsys, monkeypatch):
    """`--saveAllDebugTensors=summary` alone: every tensor has its statistics only. They pass against the reference's
    own, each row says it was compared by statistics and carries no rel_l2; a planted difference in one tensor's
    max fails there first."""
    entries = [(n, a, "FLOAT", {}) for n, a in tensors.items()]
    (kit / "summary").mkdir()
    (kit / "summary" / "tensor_summary.json").write_text(summary_text(entries))
    code, results, text = layerwise(["--captured", str(kit / "summary" / "tensor_summary.json")], tmp_path / "a",
                                    capsys, monkeypatch)  # fmt: skip
    assert code == 0, text
    c = candidate(results)
    rows = {r["tensor"]: r for r in c["rows"]}
    assert set(rows) == set(tensors) and c["first_divergence"] is None
    for r in rows.values():
        assert r["compared_by"].startswith("statistics") and "rel_l2" not in r["metrics"], r
        assert r["metrics"]["stats_diff"] < 1e-4, r  # 6 significant digits written, FP32 on both sides
    (check,) = [ch for ch in results["stages"][0]["checks"] if ch["metric"] == "stats_diff"]
    assert check["passed"] and "compared by statistics only" in check["name"]
    assert c["paired"]["passed"] and c["paired"]["by"] == {"statistics": len(tensors)}
    assert not (set(tensors) & set(c["unmatched"]["reference_only"]))  # compared, so not listed as not captured
    # a planted difference: the tensor's max 3% off (the FP32 default rel_l2 limit 0.01 applies to the statistics,
    # relative to the tensor's largest magnitude)
    doc = json.loads(summary_text(entries))
    (t,) = [t for t in doc["tensors"] if t["name"] == PLANTED]
    t["statistics"]["max"] *= 1.03
    (kit / "summary" / "tensor_summary.json").write_text(json.dumps(doc))
    code, results, text = layerwise(["--captured", str(kit / "summary")], tmp_path / "b", capsys, monkeypatch)
    assert code == 1, text
    c = candidate(results)
    assert c["first_divergence"]["tensor"] == PLANTED and c["first_divergence"]["failed"] == ["stats_diff <= 0.01"]
    # a summary cut short (trtexec stopped before its footer) exits 2, naming the file
    (kit / "summary" / "tensor_summary.json").write_text(summary_text(entries)[:-9])
    code, results, text = layerwise(["--captured", str(kit / "summary")], tmp_path / "c", capsys, monkeypatch)
    assert code == 2, text
    assert "tensor_summary.json: not valid JSON (truncated?" in results["stages"][0]["error"]["message"]
    ref = tensors[PLANTED]
    expected = 0.03 * ref.max() / max(abs(ref.min()), abs(ref.max()))  # over the reference's largest magnitude
    assert c["first_divergence"]["metrics"]["stats_max"] == pytest.approx(expected, rel=1e-3)


def test_tensorrt_names_are_mapped_by_the_layer_information(kit, tensors, tmp_path, capsys, monkeypatch):
    """TensorRT fuses each Conv with its Relu; the fused layer's output, named by TensorRT, holds the Relu's output.
    With layer_info.json in the kit, those names become the ONNX tensors; the count of mapped names is said."""
    layers, renamed = [], {}
    for k, block in enumerate(("block1", "block2", "block3", "block4")):
        conv, relu = f"/features/{block}/conv/Conv", f"/features/{block}/relu/Relu"
        trt_name = f"(Unnamed Layer* {2 * k + 1}) [Activation]_output"
        renamed[f"{relu}_output_0"] = trt_name
        layers.append({"Name": f"{conv} + {relu}", "LayerType": "CaskConvolution",
                       "Inputs": [{"Name": "x", "Location": "Device", "Dimensions": [1], "Format/Datatype": "Row major "
                                   "linear FP32"}],
                       "Outputs": [{"Name": trt_name, "Location": "Device", "Dimensions": [1],
                                    "Format/Datatype": "Row major linear FP32"}],
                       "Metadata": f"[ONNX Layer: {conv}]\x1f[ONNX Layer: {relu}]"})  # fmt: skip
    layers.append({"Name": "Reformatting CopyNode for Output Tensor 0 to x", "LayerType": "Reformat",
                   "Outputs": [{"Name": "Reformatted Output Tensor 0 to x"}]})  # fmt: skip
    fused = {n: a for n, a in tensors.items() if not n.endswith("conv/Conv_output_0")}  # fused away
    numpy_capture(kit / "fused", {**fused, "Reformatted Output Tensor 0 to x": tensors["logits"]}, renamed)
    (kit / "layer_info.json").write_text(json.dumps({"Layers": layers, "Bindings": ["input", "logits"]}))
    info = tmp_path / "engine_layers.json"  # named in a suite: `layerinfo:`
    info.write_text((kit / "layer_info.json").read_text())
    try:
        code, results, text = layerwise(["--captured", str(kit / "fused")], tmp_path / "a", capsys, monkeypatch)
    finally:
        (kit / "layer_info.json").unlink()
    assert code == 0, text
    c = candidate(results)
    assert {r["tensor"] for r in c["rows"]} == set(fused)
    assert "4 TensorRT tensor names mapped to ONNX tensors by" in c["emulation"] and ", 1 not" in c["emulation"]
    assert "/features/block2/conv/Conv_output_0" in c["unmatched"]["reference_only"]  # fused away: counted
    suite = tmp_path / "suite.yaml"
    suite.write_text(f"name: fused\nmodels:\n  reference: {REF}\n  candidates:\n    jetson: {{captured: "
                     f"{kit / 'fused'}, layerinfo: {info}}}\ninputs: {{file: {kit / 'inputs.json'}}}\nstages:\n"
                     "  layerwise: {}\n")  # fmt: skip
    r = main_in_process(["run", str(suite), "--out", str(tmp_path / "s"), "-q"], capsys, monkeypatch)
    assert r.code == 0, r.out + r.err
    c = candidate(json.loads((tmp_path / "s" / "results.json").read_text()))
    assert {r["tensor"] for r in c["rows"]} == set(fused) and str(info) in c["emulation"]
    # without the layer information they stay TensorRT's: compared as nothing, listed
    code, results, text = layerwise(["--captured", str(kit / "fused")], tmp_path / "b", capsys, monkeypatch)
    c = candidate(results)
    assert "/features/block2/relu/Relu_output_0" not in {r["tensor"] for r in c["rows"]}
    bad = tmp_path / "bad.json"
    bad.write_text('{"Layers": [')
    code, results, text = layerwise(["--captured", str(kit / "fused"), "--layer-info", str(bad)], tmp_path / "c",
                                    capsys, monkeypatch)  # fmt: skip
    assert code == 2, text
    assert "bad.json: not a trtexec --exportLayerInfo JSON" in results["stages"][0]["error"]["message"]


def test_inputs_from_trtexec_raw_files_and_polygraphy_json(kit, tmp_path, capsys, monkeypatch):
    """`--inputs 'input':FILE.bin` (trtexec's raw input, shape and type the model's) and `--inputs inputs.json`
    (Polygraphy's --save-inputs container) give the kit's own feed back: the same digest. A file of another size is
    refused with exit 2, naming it."""
    digest = json.loads((kit / "manifest.json").read_text())["digest"]
    for spec, name in ((f"'input':{kit / 'trtexec' / 'input.bin'}", "raw"), (str(kit / "inputs.json"), "json")):
        r = main_in_process(["capture", str(REF), "--inputs", spec, "--out", str(tmp_path / name)], capsys, monkeypatch)
        assert r.code == 0, r.out + r.err
        assert json.loads((tmp_path / name / "manifest.json").read_text())["digest"] == digest
    short = tmp_path / "short.bin"
    short.write_bytes((kit / "trtexec" / "input.bin").read_bytes()[:-4])
    r = main_in_process(["capture", str(REF), "--inputs", f"input:{short}", "--out", str(tmp_path / "x")], capsys,
                        monkeypatch)  # fmt: skip
    # the model's batch is dynamic: it is read from the size, which is no whole number of 1x28x28 float32 rows
    assert r.code == 2 and f"{short}: 3132 bytes for input 'input'" in r.err and "no whole number of rows" in r.err
    # layerwise --captured with the inputs the tool fed, as raw files
    numpy_capture(kit / "debug_raw_inputs", {"logits": np.zeros((1, 10), np.float32)})
    raw = f"input:{kit / 'trtexec' / 'input.bin'}"
    code, _, text = layerwise(["--captured", str(kit / "debug_raw_inputs"), "--inputs", raw], tmp_path / "l", capsys,
                              monkeypatch)  # fmt: skip
    assert code == 1 and (tmp_path / "l" / "trtexec_inputs.json").is_file(), text  # zeros are not the logits


def test_statistics_of_a_real_fp16_model_find_the_elementwise_first_divergence(kit, tmp_path, capsys, monkeypatch):
    """The demo's FP16 model (demo/fp16_repair: its BatchNormalization overflows FP16), every tensor run by ONNX
    Runtime and written as trtexec's statistics-only summary: compared by statistics alone, the first divergence is
    the one the element-wise comparison of the same model finds."""
    fp16 = ROOT / "demo" / "fp16_repair" / "fashion_bn_fp16.onnx"
    model = onnx.load(fp16)
    names = [o for n in model.graph.node for o in n.output if o in {p for m in onnx.load(REF).graph.node
                                                                      for p in m.output}]  # fmt: skip
    del model.graph.output[:]
    model.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.load(kit / "inputs.npz")["input"][:1]
    feed = {i.name: x.astype(np.float16 if i.type == "tensor(float16)" else np.float32) for i in sess.get_inputs()}
    got = dict(zip(names, sess.run(names, feed)))
    (kit / "fp16_summary").mkdir()
    entries = [(n, a.astype(np.float32), "HALF", {}) for n, a in got.items()]
    (kit / "fp16_summary" / "tensor_summary.json").write_text(summary_text(entries))
    check = ["--check", "rel_l2<=0.1"]
    code, results, text = layerwise(["--captured", str(kit / "fp16_summary"), *check], tmp_path / "a", capsys,
                                    monkeypatch)  # fmt: skip
    assert code == 1, text
    by_stats = candidate(results)["first_divergence"]
    code, results, text = layerwise([str(fp16), "--inputs", str(kit / "inputs.npz"), *check], tmp_path / "b", capsys,
                                    monkeypatch)  # fmt: skip
    assert code == 1, text
    elementwise = candidate(results)["first_divergence"]
    assert by_stats["tensor"] == elementwise["tensor"] == "/features/post_bn/BatchNormalization_output_0"
    assert "stats_diff" in by_stats["metrics"] and "rel_l2" in elementwise["metrics"]
