"""FP16 lowering of graphs with subgraphs (If/Loop bodies), and convert's output written only once it loads.

The models are made as users make them: a torch.jit.script'ed module with data-dependent control flow exported
by torch.onnx.export (dynamo=False, its defaults otherwise), and torchvision's SSDlite export
(tests/data/torchvision, made by its make_models.py). Before the fix, `convert --precision fp16` of either exited
4 (`If ... Gemm: B has inconsistent type tensor(float)`): outer values the bodies read were lowered to FP16, the
bodies' own constants were not.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests.program.files.onnx_sweep import call, data_root
from trtverify.convert.output import ConversionBug, save_checked
from trtverify.graph.onnxgraph import subgraphs

torch = pytest.importorskip("torch")

TORCHVISION = Path(__file__).resolve().parents[1] / "data" / "torchvision"


class Gated(torch.nn.Module):
    """Features computed outside, read inside an `if` with its own constants and inside a loop."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = torch.relu(self.conv(x)).mean(dim=(2, 3))
        if x.sum() > 0:
            y = self.head(f) * 0.5 + 1.25
        else:
            y = torch.tanh(f[:, :4]) - 2.0
        for _ in range(int(x.shape[0])):
            y = y * 0.75 + f[:, 4:]
        return y


@pytest.fixture(scope="module")
def gated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("gated") / "gated.onnx"
    torch.onnx.export(torch.jit.script(Gated().eval()), (torch.randn(2, 3, 16, 16),), str(path), dynamo=False)
    return path


def _run(path: Path, x: np.ndarray) -> np.ndarray:
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return s.run(None, {s.get_inputs()[0].name: x})[0]


def _outer_reads(model: onnx.ModelProto) -> set[str]:
    """Names the subgraphs of the main graph read from outside themselves."""
    found: set[str] = set()
    for n in model.graph.node:
        for sub in subgraphs(n):
            inner = {o for sn in sub.node for o in sn.output} | {i.name for i in sub.input}
            inner |= {t.name for t in sub.initializer}
            found |= {i for sn in sub.node for i in sn.input if i and i not in inner}
    return found


def test_fp16_of_if_and_loop_bodies_loads_and_matches(gated: Path, tmp_path: Path):
    ref = onnx.load(str(gated))
    assert {"If", "Loop"} <= {n.op_type for n in ref.graph.node}
    out = tmp_path / "gated16.onnx"
    r = call("convert", str(gated), "--precision", "fp16", "-o", str(out))
    assert r.code == 0, r.err
    made = onnx.load(str(out))
    onnx.checker.check_model(made, full_check=True)  # types agree across scopes
    # the bodies read the features through one FP32 cast of the FP16 value the outer graph makes
    casts = {n.output[0]: n for n in made.graph.node if n.op_type == "Cast"}
    reads = _outer_reads(made)
    fed = [casts[x] for x in reads if x in casts]
    assert fed and all(c.attribute[0].i == onnx.TensorProto.FLOAT for c in fed), reads
    producers = {o: n for n in made.graph.node for o in n.output}
    assert all(producers[c.input[0]].op_type == "ReduceMean" for c in fed)
    rng = np.random.default_rng(0)
    for sign in (1.0, -1.0):  # both branches of the If
        x = (sign * np.abs(rng.standard_normal((2, 3, 16, 16)))).astype(np.float32)
        want, got = _run(gated, x), _run(out, x)
        np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)
    r = call("layerwise", str(gated), str(out), "--out", str(tmp_path / "lw"))
    assert r.code in (0, 1), r.err


def test_a_conversion_that_breaks_the_model_is_never_written(gated: Path, tmp_path: Path):
    """The model convert made before the fix (the bodies reading the FP16 features): refused, the reason named,
    the file already at the destination left as it was, no temporary file left behind."""
    out = tmp_path / "gated16.onnx"
    assert call("convert", str(gated), "--precision", "fp16", "-o", str(out)).code == 0
    broken = onnx.load(str(out))
    undo = {n.output[0]: n.input[0] for n in broken.graph.node if n.op_type == "Cast" and n.output[0].endswith("fp32")}
    for n in broken.graph.node:
        for sub in subgraphs(n):
            for sn in sub.node:
                for k, x in enumerate(sn.input):
                    sn.input[k] = undo.get(x, x)
    dest = tmp_path / "kept.onnx"
    dest.write_bytes(b"an older file")
    with pytest.raises(ConversionBug, match="inconsistent type") as exc:
        save_checked(broken, dest, gated, "fp16")
    assert exc.value.exit_code == 4 and str(gated) in str(exc.value)
    assert dest.read_bytes() == b"an older file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gated16.onnx", "kept.onnx"]


def test_temporary_files_of_a_crashed_check_are_removed(gated: Path, tmp_path: Path):
    """A worker that ONNX Runtime crashed while checking a model leaves its temporary file (`.NAME.PID.X.tmp`); the
    next write to that destination removes it, and leaves one of a process that still runs."""
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()
    orphan = tmp_path / f".g16.onnx.{dead.pid}.abc123.tmp"
    live = tmp_path / f".g16.onnx.{os.getpid()}.def456.tmp"
    orphan.write_bytes(b"x")
    live.write_bytes(b"x")
    save_checked(onnx.load(str(gated)), tmp_path / "g16.onnx", gated)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, "g16.onnx"])


def test_convert_of_a_model_onnx_runtime_cannot_load_is_exit_2_and_writes_nothing(tmp_path: Path):
    """An opset-6 AveragePool (the onnx package's pytorch-converted/test_AvgPool1d), which ONNX Runtime has no
    kernel for: exit 2 naming the file and ONNX Runtime's message; -o neither written nor replaced."""
    ref = data_root() / "pytorch-converted" / "test_AvgPool1d" / "model.onnx"
    out = tmp_path / "avg16.onnx"
    r = call("convert", str(ref), "--precision", "fp16", "-o", str(out))
    assert r.code == 2 and str(ref) in r.err and "NOT_IMPLEMENTED" in r.err, r.err
    assert not out.exists() and not os.listdir(tmp_path)
    out.write_bytes(b"old")
    assert call("convert", str(ref), "--precision", "fp16", "-o", str(out)).code == 2
    assert out.read_bytes() == b"old" and os.listdir(tmp_path) == ["avg16.onnx"]


def test_the_suite_recipe_makes_the_same_checked_model(gated: Path, tmp_path: Path):
    from trtverify.config.models import Candidate
    from trtverify.convert.recipes import make

    spec = Candidate.model_validate({"from": "reference", "precision": "fp16"})
    path = make(gated, "half", spec, [], tmp_path / "candidates")
    assert path.parent == tmp_path / "candidates" and [p.name for p in path.parent.iterdir()] == [path.name]
    onnx.checker.check_model(str(path), full_check=True)
    x = np.abs(np.random.default_rng(1).standard_normal((2, 3, 16, 16))).astype(np.float32)
    np.testing.assert_allclose(_run(path, x), _run(gated, x), rtol=2e-2, atol=2e-2)


def test_torchvision_ssdlite_converts_to_fp16_that_loads_and_compares(tmp_path: Path):
    ref = TORCHVISION / "ssdlite.onnx"
    assert "If" in {n.op_type for n in onnx.load(str(ref), load_external_data=False).graph.node}
    out = tmp_path / "ssdlite16.onnx"
    r = call("convert", str(ref), "--precision", "fp16", "-o", str(out))
    assert r.code == 0, r.err  # exit 4 before: If_1947 ... Add_1952: B has inconsistent type tensor(float)
    onnx.checker.check_model(str(out), full_check=True)
    ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    r = call("layerwise", str(ref), str(out), "--out", str(tmp_path / "lw"))
    assert r.code in (0, 1), r.err  # random weights: FP16 may move the top-k; never a crash
    assert "paired and compared" in r.err


def test_a_model_onnx_checker_passes_but_this_onnx_runtime_cannot_load_is_written_with_a_warning(
    gated: Path, tmp_path: Path
):
    """ONNX Runtime 1.30 (the GPU machine's) refuses the FP16 encoder of tests/program/faults/test_native_crash.py:
    'Type Error: Type (tensor(float)) of output arg (InsertedPrecisionFreeCast_...)', its own inserted casts mistyped;
    1.32, the one here, loads it. That refusal cannot happen here, so the verdict is given its message as 1.30 wrote
    it: a well-typed file is written with a warning naming ONNX Runtime's version, not called a bug in trtverify."""
    from trtverify.convert.output import Problems, _verdict

    message = (
        "[ONNXRuntimeError] : 1 : FAIL : Type Error: Type (tensor(float)) of output arg (InsertedPrecisionFreeCast_x) "
        "of node (Cast_3) does not match expected type (tensor(float16))."
    )
    (warning,) = _verdict(Problems(checker=None, onnxruntime=message), gated, tmp_path / "g16.onnx", "fp16")
    assert "cannot load g16.onnx" in warning and "passes onnx.checker's full check" in warning
    assert "InsertedPrecisionFreeCast_x" in warning
    with pytest.raises(ConversionBug):  # the checker objecting as well is still the conversion's fault
        _verdict(Problems(checker="inconsistent type", onnxruntime=message), gated, tmp_path / "g16.onnx", "fp16")
