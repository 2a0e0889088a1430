"""Pairing on what real exporters and converters make: one torch module exported by TorchScript and by dynamo
(names that never match, decompositions that differ), the candidate an FP16 (`convert_float_to_float16`,
keep_io_types) or INT8 (`quantize_static`, defaults) conversion of the *other* exporter's graph.

Layerwise pairs such exports by structure (same operations on paired inputs, equal weights up to the
candidate's precision) and says how many reference tensors it paired; a run resting on too few fails the
check `tensors paired`. A pair is never made to a wrong value: a candidate of other weights pairs only what
holds the same value, and fails the check. Rename suggestions are right (equal shape, same operation) or absent.
Every model is built here from torch with the tools' defaults (a few seconds for all of them).
"""

from __future__ import annotations

import logging
import re
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.conftest import as_json, run_cli, write_suite
from trtverify.cli.run import run_and_record
from trtverify.config.loader import load_suite
from trtverify.report.html import write_report

torch = pytest.importorskip("torch")
nn = torch.nn


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        short = stride != 1 or cin != cout
        self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)) if short else None

    def forward(self, x):
        y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(y + (self.down(x) if self.down is not None else x))


class SmallResNet(nn.Module):
    """ResNet-18's shape in miniature: 7x7 stem, max pool, two basic blocks (one strided, with a 1x1 shortcut)."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 16, 7, 2, 3, bias=False), nn.BatchNorm2d(16)
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.layer1, self.layer2 = Block(16, 16, 1), Block(16, 32, 2)
        self.fc = nn.Linear(32, classes)

    def forward(self, x):
        x = self.layer2(self.layer1(self.pool(torch.relu(self.bn1(self.conv1(x))))))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class Encoder(nn.Module):
    """nn.TransformerEncoder, pre-norm, GELU: TorchScript writes the GELU as Div/Erf/Add/Mul/Mul, dynamo as one
    Gelu node, and each writes the attention's reshapes its own way."""

    def __init__(self, layers: int = 2, d: int = 32, heads: int = 4, ffn: int = 64, activation: str = "gelu"):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d, heads, ffn, 0.0, activation, batch_first=True, norm_first=True)
        self.e = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.h = nn.Linear(d, 10)

    def forward(self, x):
        return self.h(self.e(x))


class Detector(nn.Module):
    """A conv backbone with box and score heads at two scales, reshaped and concatenated (SSD/YOLO-style)."""

    def __init__(self, anchors: int = 3, classes: int = 4):
        super().__init__()
        self.classes = classes
        self.b1 = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.BatchNorm2d(8), nn.SiLU())
        self.b2 = nn.Sequential(nn.Conv2d(8, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.SiLU())
        self.box = nn.ModuleList([nn.Conv2d(8, anchors * 4, 1), nn.Conv2d(16, anchors * 4, 1)])
        self.cls = nn.ModuleList([nn.Conv2d(8, anchors * classes, 1), nn.Conv2d(16, anchors * classes, 1)])

    def forward(self, x):
        f1 = self.b1(x)
        f2 = self.b2(f1)
        boxes, scores = [], []
        for f, b, c in zip((f1, f2), self.box, self.cls):
            n = f.shape[0]
            boxes.append(b(f).permute(0, 2, 3, 1).reshape(n, -1, 4))
            scores.append(torch.sigmoid(c(f).permute(0, 2, 3, 1).reshape(n, -1, self.classes)))
        return torch.cat(boxes, 1), torch.cat(scores, 1)


SHAPES = {"cnn": (3, 64, 64), "encoder": (8, 32), "detector": (3, 32, 32)}
OUTPUTS = {"cnn": ["logits"], "encoder": ["y"], "detector": ["boxes", "scores"]}


def build(arch: str, seed: int = 0) -> nn.Module:
    """The architecture with seeded weights as training leaves them: distinct per layer, BatchNorm statistics
    away from 0 and 1."""
    torch.manual_seed(seed)
    model = {"cnn": SmallResNet, "encoder": Encoder, "detector": Detector}[arch]().eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
        for p in model.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
            elif not p.any():
                p.uniform_(-0.1, 0.1)
    return model


def export(model: nn.Module, arch: str, path: Path, dynamo: bool, shape: tuple[int, ...] | None = None) -> None:
    x = torch.randn(2, *(shape or SHAPES[arch]))
    names = {"input_names": ["x"], "output_names": OUTPUTS[arch]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            batch = {"x": {0: torch.export.Dim("batch")}}
            torch.onnx.export(model, (x,), str(path), dynamo=True, dynamic_shapes=batch, external_data=False, **names)
        else:
            torch.onnx.export(model, (x,), str(path), dynamo=False, opset_version=17,
                              dynamic_axes={"x": {0: "batch"}}, **names)  # fmt: skip


def to_fp16(src: Path, dst: Path) -> None:
    from onnxruntime.transformers.float16 import convert_float_to_float16

    onnx.save(convert_float_to_float16(onnx.load(str(src)), keep_io_types=True), str(dst))


def to_int8(src: Path, dst: Path, calib: np.ndarray) -> None:
    """ONNX Runtime's quantize_static with its default arguments (QDQ, asymmetric uint8 activations)."""
    from onnxruntime.quantization import CalibrationDataReader, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.rows = iter([{"x": calib[i : i + 1]} for i in range(len(calib))])

        def get_next(self):
            return next(self.rows, None)

    logging.getLogger().setLevel(logging.ERROR)  # "Please consider pre-processing before quantization"
    quantize_static(str(src), str(dst), Reader())


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Per architecture: both exports of one module, an FP16 conversion of each, the inputs (4 rows)."""
    folder = tmp_path_factory.mktemp("exports")
    for arch in SHAPES:
        model = build(arch)
        for exporter in ("ts", "dy"):
            export(model, arch, folder / f"{arch}_{exporter}.onnx", dynamo=exporter == "dy")
            to_fp16(folder / f"{arch}_{exporter}.onnx", folder / f"{arch}_{exporter}_fp16.onnx")
        rows = np.random.default_rng(0).standard_normal((4, *SHAPES[arch])).astype(np.float32)
        np.savez(folder / f"{arch}_x.npz", x=rows)
    return folder


def layerwise(folder: Path, reference: str, candidate: str, inputs: str, extra: str = "", html: bool = False) -> dict:
    text = (
        f"name: pairing\nmodels:\n  reference: {reference}\n  candidates:\n    c: {candidate}\n"
        f"inputs:\n  file: {inputs}\nstages:\n  layerwise:\n    samples: 2\n{extra}"
    )
    out = folder / f"out-{Path(reference).stem}-{Path(candidate).stem}"
    results = run_and_record(load_suite(write_suite(folder, text, f"{out.name}.yaml")), out)
    if html:
        write_report(results, out / "report.html")
    return as_json(results)["stages"][0]


# paired of the reference's tensors (measured; docs/stages/layerwise.md#pairing has the table)
EXPECTED = {
    ("cnn", "ts"): (17, 17), ("cnn", "dy"): (17, 17),
    ("encoder", "ts"): (80, 88), ("encoder", "dy"): (80, 84),
    ("detector", "ts"): (22, 22), ("detector", "dy"): (22, 22),
}  # fmt: skip


@pytest.mark.parametrize("arch", list(SHAPES))
@pytest.mark.parametrize("ref", ["ts", "dy"])
def test_two_exports_of_one_model_pair_by_structure(models: Path, arch: str, ref: str):
    other = "dy" if ref == "ts" else "ts"
    stage = layerwise(models, f"{arch}_{ref}.onnx", f"{arch}_{other}_fp16.onnx", f"{arch}_x.npz")
    cand = stage["candidates"][0]
    paired = cand["paired"]
    assert (paired["paired"], paired["reference_tensors"]) == EXPECTED[(arch, ref)]
    assert paired["passed"] and paired["by"].get("structure", 0) >= paired["paired"] - len(OUTPUTS[arch])
    assert stage["status"] == "passed" and cand["first_divergence"] is None
    for row in cand["rows"]:  # each pair holds one value: FP16's rounding apart, nothing
        assert row["metrics"]["rel_l2"] < 0.01 and row["metrics"]["cosine"] > 0.9999, row
        assert row["shape"] is not None and not row.get("errors")
    check = next(c for c in stage["checks"] if c["name"] == "c: tensors paired")
    assert check["passed"] and check["value"] == paired["paired"] and check["threshold"] == paired["required"]


def test_what_decomposes_differently_stays_unpaired(models: Path):
    """The GELU that TorchScript writes as five nodes and dynamo as one: the five stay unpaired (dynamo has no
    value for their insides), the GELU's result pairs with the Gelu node (the input of the same MatMul)."""
    stage = layerwise(models, "encoder_ts.onnx", "encoder_dy_fp16.onnx", "encoder_x.npz")
    cand = stage["candidates"][0]
    ops = {row["tensor"]: row["op_type"] for row in cand["rows"]}
    unpaired = cand["unmatched"]["reference_only"]
    assert sorted({t.rsplit("/", 1)[1] for t in unpaired}) == ["Add_1_output_0", "Div_output_0", "Erf_output_0",
                                                               "Mul_output_0"]  # fmt: skip
    gelu = {row["tensor"]: row for row in cand["rows"] if row["tensor"] in ("/e/layers.0/Mul_1_output_0",
                                                                            "/e/layers.1/Mul_1_output_0")}  # fmt: skip
    assert len(gelu) == 2 and all(r["candidate_tensor"].startswith("gelu") for r in gelu.values())
    assert all("the reference computes it with Mul, the candidate Gelu" in r["pairing"]["why"] for r in gelu.values())
    assert ops["/e/layers.0/Mul_1_output_0"] == "Mul"


def test_without_structure_the_run_fails_on_too_few_pairs(models: Path):
    """Names alone pair the output only: `tensors paired` fails, the terminal says on how few the verdict rests."""
    suite = write_suite(
        models,
        "name: names-only\nmodels:\n  reference: encoder_ts.onnx\n  candidates:\n    c: encoder_dy_fp16.onnx\n"
        "inputs:\n  file: encoder_x.npz\nstages:\n  layerwise:\n    samples: 2\n    pair_by_structure: false\n",
        "names-only.yaml",
    )
    r = run_cli("run", str(suite), "--out", str(models / "names-only"))
    assert r.code == 1, r.out + r.err
    assert "c (fp16, checks: default for fp16): 1 of 88 reference tensors paired and compared (too few: " in r.out
    assert "; too few paired for a verdict" in r.out and "no divergence" not in r.out
    fail = next(line for line in r.out.splitlines() if "FAIL c: tensors paired" in line)
    assert "tensors paired: 1 (limit >= " in fail and "turn stages.layerwise.pair_by_structure on" in fail


@pytest.mark.parametrize("arch", list(SHAPES))
def test_int8_qdq_of_the_other_exporter_pairs_by_structure(models: Path, arch: str):
    """quantize_static's Q/DQ pairs are looked through, and where one does a Relu's clamp (the quantiser folded the
    Relu into it) it is that Relu; weights compare up to INT8."""
    rows = np.load(models / f"{arch}_x.npz")["x"]
    to_int8(models / f"{arch}_dy.onnx", models / f"{arch}_dy_int8.onnx", rows)
    stage = layerwise(models, f"{arch}_ts.onnx", f"{arch}_dy_int8.onnx", f"{arch}_x.npz", html=True)
    cand = stage["candidates"][0]
    assert cand["paired"]["paired"] == EXPECTED[(arch, "ts")][0] and cand["paired"]["passed"]
    assert stage["status"] == "passed" and cand["precision"] == "int8"
    assert all(row["metrics"]["rel_l2"] < 0.05 for row in cand["rows"])
    html = (models / f"out-{arch}_ts-{arch}_dy_int8" / "report.html").read_text(encoding="utf-8")
    assert f"{cand['paired']['paired']} of {cand['paired']['reference_tensors']} reference tensors paired (" in html


def test_identical_layers_pair_in_their_own_order(tmp_path: Path):
    """nn.TransformerEncoder clones its layer: untrained, every layer holds the same weights, so no weight tells
    the layers apart (the TorchScript exporter even shares them). Pairs follow the data from the input instead,
    and never pair a tensor with another layer's."""
    torch.manual_seed(0)
    model = Encoder(layers=4, activation="relu").eval()
    export(model, "encoder", tmp_path / "ts.onnx", dynamo=False)
    export(model, "encoder", tmp_path / "dy.onnx", dynamo=True)
    to_fp16(tmp_path / "dy.onnx", tmp_path / "dy_fp16.onnx")
    np.savez(tmp_path / "x.npz", x=np.random.default_rng(0).standard_normal((2, 8, 32)).astype(np.float32))
    stage = layerwise(tmp_path, "ts.onnx", "dy_fp16.onnx", "x.npz")
    cand = stage["candidates"][0]
    assert cand["paired"]["paired"] == cand["paired"]["reference_tensors"] == 158 and stage["status"] == "passed"
    assert all(row["metrics"]["rel_l2"] < 0.01 for row in cand["rows"])  # another layer's value: rel_l2 ~ 1


def test_a_fault_in_the_candidate_is_found_where_it_is(models: Path):
    """One weight of the dynamo export scaled by 1.5: its Conv no longer equals the reference's, but it is the
    input of the same Relu on both sides, so it is still paired, and it is where the run fails and what it blames."""
    from onnx import numpy_helper

    m = onnx.load(str(models / "cnn_dy.onnx"))
    weight = next(i for i in m.graph.initializer if i.name.startswith("layer2.conv1."))
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * 1.5, weight.name))
    onnx.save(m, str(models / "bad_dy.onnx"))
    to_fp16(models / "bad_dy.onnx", models / "bad_dy_fp16.onnx")
    stage = layerwise(models, "cnn_ts.onnx", "bad_dy_fp16.onnx", "cnn_x.npz")
    cand = stage["candidates"][0]
    assert stage["status"] == "failed" and cand["paired"]["paired"] == 17
    assert cand["first_divergence"]["tensor"] == "/layer2/conv1/Conv_output_0"
    assert cand["root_causes"][0]["node"] == "/layer2/conv1/Conv"
    upstream = [r for r in cand["rows"] if r["topo_index"] < cand["first_divergence"]["topo_index"]]
    assert upstream and all(r["passed"] for r in upstream)


def test_a_failure_of_structural_pairing_leaves_the_name_pairs_and_says_why(models: Path, monkeypatch):
    """Structural pairing adds to a run: where it fails on a graph it did not foresee, the run goes on with the
    pairs of names, and results.json, the check and the terminal line say why. (The failure is made by patching
    the matcher: the one fake here, standing in for a bug no real model triggers today.)"""
    from trtverify.compare import structure
    from trtverify.report.text import stage_lines
    from trtverify.results.models import document

    def broken(self, wanted):
        raise RuntimeError("an op in a form not foreseen")

    monkeypatch.setattr(structure.Matcher, "run", broken)
    stage = layerwise(models, "cnn_ts.onnx", "cnn_dy_fp16.onnx", "cnn_x.npz", html=True)
    cand = stage["candidates"][0]
    assert cand["paired"]["structure_error"] == "RuntimeError: an op in a form not foreseen"
    html = (models / "out-cnn_ts-cnn_dy_fp16" / "report.html").read_text(encoding="utf-8")
    assert "too few for a verdict on the layers" in html and "Structural pairing failed: RuntimeError" in html
    assert [r["tensor"] for r in cand["rows"]] == ["logits"] and stage["status"] == "failed"
    check = next(c for c in stage["checks"] if c["name"] == "c: tensors paired")
    assert "structural pairing failed (RuntimeError: an op in a form not foreseen)" in check["detail"]["reason"]
    results = document().model_validate(as_json_file(models / "out-cnn_ts-cnn_dy_fp16" / "results.json"))
    line = next(x for x in stage_lines(results.stages[0]) if "reference tensors paired" in x)
    assert "structural pairing failed: RuntimeError: an op in a form not foreseen" in line


def test_a_model_with_other_weights_pairs_no_wrong_value(models: Path):
    """The same architecture with other weights: no weight matches, so nothing computed from one pairs; what
    pairs holds the same value, and the run fails for want of pairs instead of comparing wrong ones."""
    export(build("cnn", seed=1), "cnn", models / "other_dy.onnx", dynamo=True)
    to_fp16(models / "other_dy.onnx", models / "other_dy_fp16.onnx")
    stage = layerwise(models, "cnn_ts.onnx", "other_dy_fp16.onnx", "cnn_x.npz")
    cand = stage["candidates"][0]
    assert [r["tensor"] for r in cand["rows"]] == ["logits"]  # the graph output, paired by its name
    check = next(c for c in stage["checks"] if c["name"] == "c: tensors paired")
    assert stage["status"] == "failed" and not check["passed"] and check["value"] == 1
    assert "names and structure paired no more" in check["detail"]["reason"]


def _shapes(model: Path, names: list[str], x: np.ndarray) -> dict[str, tuple]:
    import onnxruntime as ort

    m = onnx.load(str(model))
    m.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return {n: v.shape for n, v in zip(names, sess.run(names, {"x": x}))}


def _producers(model: Path) -> dict[str, str]:
    return {o: n.op_type for n in onnx.load(str(model)).graph.node for o in n.output}


def test_rename_suggestions_on_default_int8_are_right_or_absent(tmp_path: Path):
    """ONNX Runtime's default INT8 of a ResNet-style CNN, names only: the Conv outputs whose Relu the quantiser
    folded have no same-named tensor, the Gemm's output before its Q/DQ is only the candidate's. No rename may
    pair a [1, 16, 32, 32] Conv output with the [1, 10] Gemm one (what was once suggested); the MaxPool output
    renamed in the candidate is the one certain rename, and is suggested."""
    export(build("cnn"), "cnn", tmp_path / "ref.onnx", dynamo=False)
    rows = np.random.default_rng(0).standard_normal((4, *SHAPES["cnn"])).astype(np.float32)
    np.savez(tmp_path / "x.npz", x=rows)
    to_int8(tmp_path / "ref.onnx", tmp_path / "int8.onnx", rows)
    m = onnx.load(str(tmp_path / "int8.onnx"))
    for n in m.graph.node:  # the MaxPool and its output renamed, as a converter might
        if n.op_type == "MaxPool":
            n.name = "pool"
        n.output[:] = ["pooled" if o == "/pool/MaxPool_output_0" else o for o in n.output]
        n.input[:] = ["pooled" if i == "/pool/MaxPool_output_0" else i for i in n.input]
    onnx.save(m, str(tmp_path / "int8.onnx"))
    suite = write_suite(
        tmp_path,
        "name: int8\nmodels:\n  reference: ref.onnx\n  candidates:\n    int8: int8.onnx\ninputs:\n  file: x.npz\n"
        "stages:\n  layerwise:\n    samples: 2\n    pair_by_structure: false\n",
    )
    r = run_cli("run", str(suite), "--out", str(tmp_path / "o"))
    assert r.code == 0, r.out + r.err
    line = next(line for line in r.out.splitlines() if "int8: unmatched tensors:" in line)
    assert "logits_QuantizeLinear_Input" in line  # the Gemm output only the candidate has is listed...
    shown = re.search(r"pair them with stages\.layerwise\.rename: \{(.*)\}", line)
    assert shown is not None
    suggested = dict(p.split(": ") for p in shown.group(1).split(", "))
    results = as_json_file(tmp_path / "o" / "results.json")
    assert results["stages"][0]["candidates"][0]["unmatched"]["suggested_renames"] == suggested
    assert suggested == {"/pool/MaxPool_output_0": "pooled"}  # ... and paired with nothing
    ref_shapes = _shapes(tmp_path / "ref.onnx", list(suggested), rows[:1])
    cand_shapes = _shapes(tmp_path / "int8.onnx", list(suggested.values()), rows[:1])
    ref_ops, cand_ops = _producers(tmp_path / "ref.onnx"), _producers(tmp_path / "int8.onnx")
    for a, b in suggested.items():  # every suggestion: equal shapes, the same operation
        assert ref_shapes[a] == cand_shapes[b] and ref_ops[a] == cand_ops[b]


def as_json_file(path: Path) -> dict:
    import json

    return json.loads(path.read_text(encoding="utf-8"))
