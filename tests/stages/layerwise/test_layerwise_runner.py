"""The capture kit's runner script (kit/run_engine.py, from trtverify/data/kitfiles/), end to end: `trtverify capture`
writes it into the kit, it runs there, `trtverify layerwise --captured` compares the folder it writes.

TensorRT cannot run here (no GPU), so the script runs in a subprocess against a FAKE `tensorrt` module and a FAKE
CUDA runtime (tests/data/fake_tensorrt/, put on PYTHONPATH; the runtime is handed over with `--cudart
python:fake_cudart`). They implement only the calls the script makes, with TensorRT's documented names (8.6, 10.x and
11.x behaviour, FAKE_TRT_VERSION), and the "engine" computes its outputs with real ONNX Runtime on the ONNX model it
was built from, in FP32 whatever the flags. What is real: the script as a kit carries it, the kit, its digests, the
ctypes calls (marshalled through C function pointers), the .npy folders and run.json, and trtverify reading them.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import py_compile
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, main_in_process
from tests.stages.layerwise.test_layerwise_captured import PLANTED, REF, candidate, layerwise, plant_overflow
from trtverify.toolout.captures import read_capture
from trtverify.toolout.kit import feed_digest, feeds_digest

SCRIPT = ROOT / "trtverify" / "data" / "kitfiles" / "run_engine.py"
FAKE = ROOT / "tests" / "data" / "fake_tensorrt"
TINY = ROOT / "tests" / "data" / "tiny" / "tiny.onnx"  # torch.onnx.export with a dynamic batch axis


def runner(kit: Path, *args: str, version: str = "10.8.0.43", fake: bool = True) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, FAKE_TRT_VERSION=version, PYTHONPATH=str(FAKE) if fake else "")
    cmd = [sys.executable, str(kit / "run_engine.py"), "--cudart", "python:fake_cudart", *args]
    return subprocess.run(cmd, cwd=kit, capture_output=True, text=True, timeout=120, env=env)


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kit of two feeds of the FP16-repair demo's FP32 model (torch.onnx.export), with the model beside it."""
    folder = tmp_path_factory.mktemp("runner")
    (folder / REF.name).write_bytes(REF.read_bytes())
    mp = pytest.MonkeyPatch()
    try:
        r = main_in_process(["capture", str(folder / REF.name), "--samples", "2", "--out", str(folder / "kit")],
                            _Quiet(), mp)  # fmt: skip
    finally:
        mp.undo()
    assert r.code == 0, r.err
    return folder / "kit"


class _Quiet:  # a capsys stand-in for the module-scoped fixture
    def readouterr(self):  # noqa: ANN201
        return type("C", (), {"out": "", "err": ""})()


def test_the_script_is_python_3_8_and_imports_only_tensorrt_numpy_and_the_standard_library(tmp_path: Path):
    source = SCRIPT.read_text()
    tree = ast.parse(source, feature_version=(3, 8))  # JetPack 5's Python
    py_compile.compile(str(SCRIPT), cfile=str(tmp_path / "run_engine.pyc"), doraise=True)
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported - set(sys.stdlib_module_names) == {"numpy", "tensorrt"}
    assert not any(isinstance(n, ast.JoinedStr) and "=}" in ast.get_source_segment(source, n) for n in ast.walk(tree))


def test_marked_all_run_is_compared_and_a_planted_overflow_is_found(kit: Path, tmp_path, capsys, monkeypatch):
    assert (kit / "run_engine.py").read_text() == SCRIPT.read_text()
    assert "python3 run_engine.py --onnx ../fashion_bn_fp32.onnx --mark-all" in (kit / "README.md").read_text()
    p = runner(kit, "--onnx", f"../{REF.name}", "--mark-all", "--fp16", "--out", "captured/runner")
    assert p.returncode == 0, p.stderr
    assert "2 feeds, 17 tensors each, TensorRT 10.8.0.43 on Fake GPU" in p.stdout
    out = kit / "captured" / "runner"
    record = json.loads((out / "run.json").read_text())
    rows = np.load(kit / "inputs.npz")["input"]  # the kit's two feeds are its two rows
    digest = feeds_digest([feed_digest({"input": rows[i : i + 1]}) for i in range(2)])
    assert record["kit_digest"] == digest == json.loads((kit / "manifest.json").read_text())["digest"]
    assert record["build"] == {"marked": 16, "precision_flags": ["fp16"], "strongly_typed": False}
    assert (record["gpu"], record["compute_capability"], record["cuda_runtime"]) == ("Fake GPU (tests, no CUDA)",
                                                                                     "8.7", "12.4")  # fmt: skip
    assert sorted(p.name for p in out.iterdir()) == ["0", "1", "run.json"]
    assert (out / "0" / "%2Ffeatures%2Fblock2%2Fconv%2FConv_output_0.npy").is_file()

    code, results, text = layerwise(["--captured", str(out)], tmp_path / "a", capsys, monkeypatch)
    assert code == 0, text
    c = candidate(results)
    assert c["first_divergence"] is None and len(c["rows"]) >= 10
    assert "TensorRT 10.8.0.43 on Fake GPU (tests, no CUDA) (sm 8.7)" in c["emulation"]
    assert "built there from fashion_bn_fp32.onnx with --mark-all --fp16" in c["emulation"]

    planted = kit.parent / "planted.onnx"
    plant_overflow(REF, planted)
    p = runner(kit, "--onnx", "../planted.onnx", "--mark-all", "--out", "captured/planted")
    assert p.returncode == 0, p.stderr
    code, results, text = layerwise(["--captured", str(kit / "captured" / "planted")], tmp_path / "b", capsys,
                                    monkeypatch)  # fmt: skip
    assert code == 1, text
    got = candidate(results)
    assert np.abs(read_capture(kit / "captured" / "planted").iterations[1][PLANTED]()).max() > 65504
    assert got["first_divergence"]["tensor"] == PLANTED and got["root_causes"][0]["tensor"] == PLANTED


def test_a_run_record_of_other_inputs_is_refused_naming_both_digests(kit: Path, tmp_path, capsys, monkeypatch):
    p = runner(kit, "--onnx", f"../{REF.name}", "--out", "captured/outputs_only")
    assert p.returncode == 0, p.stderr
    out = kit / "captured" / "outputs_only"
    assert sorted(f.name for f in (out / "0").iterdir()) == ["logits.npy"]
    record = json.loads((out / "run.json").read_text())
    other = "ab" * 32
    (out / "run.json").write_text(json.dumps({**record, "kit_digest": other}))
    code, results, text = layerwise(["--captured", str(out)], tmp_path / "a", capsys, monkeypatch)
    assert code == 2, text
    why = results["stages"][0]["error"]["message"]
    assert "made from other inputs than its kit's" in why and str(out / "run.json") in why
    assert other[:12] in why and record["kit_digest"][:12] in why
    # a record of three feeds beside two iteration folders: copied back in part
    (out / "run.json").write_text(json.dumps({**record, "feeds": 3}))
    code, results, text = layerwise(["--captured", str(out)], tmp_path / "b", capsys, monkeypatch)
    assert code == 2 and "records 3 feeds" in results["stages"][0]["error"]["message"], text


@pytest.mark.parametrize("version", ["8.6.1.6", "11.1.0.1"])
def test_tensorrt_8_6_and_11_and_a_dynamic_batch(version: str, tmp_path: Path, capsys, monkeypatch):
    """The version-dependent calls: before 10 the ONNX parser needs EXPLICIT_BATCH and the output allocator is called
    through reallocate_output; from 10 through reallocate_output_async; 11 has no precision flags (refused, exit 2). A
    dynamic batch gets an optimization profile at the kit's shape; an engine saved by one run is run by another."""
    (tmp_path / TINY.name).write_bytes(TINY.read_bytes())
    kit = tmp_path / "kit"
    r = main_in_process(["capture", str(tmp_path / TINY.name), "--dim", "batch=2", "--out", str(kit)], capsys,
                        monkeypatch)  # fmt: skip
    assert r.code == 0, r.err
    if version.startswith("11"):
        p = runner(kit, "--onnx", f"../{TINY.name}", "--fp16", version=version)
        assert p.returncode == 2 and "TensorRT 11.1.0.1 has no FP16 builder flag" in p.stderr, p.stderr
    p = runner(kit, "--onnx", f"../{TINY.name}", "--mark-all", "--save-engine", "tiny.engine", version=version)
    assert p.returncode == 0, p.stderr
    p = runner(kit, "--engine", "tiny.engine", "--out", "captured/engine", version=version)
    assert p.returncode == 0, p.stderr
    assert json.loads((kit / "captured" / "engine" / "run.json").read_text())["engine"] == str(kit / "tiny.engine")
    for out in ("runner", "engine"):
        code, results, text = layerwise_of(TINY, kit / "captured" / out, tmp_path / out, capsys, monkeypatch)
        assert code == 0, text
        assert f"TensorRT {version}" in candidate(results)["emulation"]


def layerwise_of(model: Path, captured: Path, out: Path, capsys, monkeypatch) -> tuple[int, dict, str]:
    r = main_in_process(["layerwise", str(model), "--captured", str(captured), "--out", str(out), "-q"], capsys,
                        monkeypatch)  # fmt: skip
    return r.code, json.loads((out / "results.json").read_text()), r.out + r.err


def test_a_changed_kit_an_existing_output_and_a_missing_tensorrt_are_refused(kit: Path, tmp_path: Path):
    p = runner(kit, "--onnx", f"../{REF.name}", "--out", "captured/once")
    assert p.returncode == 0, p.stderr
    p = runner(kit, "--onnx", f"../{REF.name}", "--out", "captured/once")
    assert p.returncode == 2 and "exists and is not empty" in p.stderr, p.stderr
    if importlib.util.find_spec("tensorrt") is None:
        p = runner(kit, "--onnx", f"../{REF.name}", fake=False)
        assert p.returncode == 3 and "cannot import tensorrt" in p.stderr, p.stderr
    changed = tmp_path / "changed"
    changed.mkdir()
    for f in ("manifest.json", "run_engine.py"):
        (changed / f).write_bytes((kit / f).read_bytes())
    rows = dict(np.load(kit / "inputs.npz"))
    np.savez(changed / "inputs.npz", input=rows["input"] + 1)
    p = runner(changed, "--onnx", str(kit.parent / REF.name))
    assert p.returncode == 2 and "does not have the digest the manifest records" in p.stderr, p.stderr


def _script_module():  # noqa: ANN202
    spec = importlib.util.spec_from_file_location("run_engine_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_the_memory_layer_binds_the_real_cuda_runtime_where_one_is_installed():
    """No fake here: the script's ctypes layer loads the machine's real libcudart.so (found as the script finds it)
    and calls it. Every function it binds must exist (CUDA 11 to 13); without a GPU, the first call fails with the
    runtime's own words and exit code 4; with one, a copy goes to the device and back."""
    script = _script_module()
    path = script.find_cudart()
    if path == "libcudart.so":
        pytest.skip("no CUDA runtime library (libcudart.so) installed on this machine")
    cuda = script.Cuda(script.load_cudart(path))  # binds every function: AttributeError if one is missing
    assert any(hasattr(cuda.lib, s) for s in ("cudaGetDeviceProperties_v2", "cudaGetDeviceProperties"))
    try:
        where = cuda.describe(0)
    except script.Failed as exc:
        assert exc.code == 4 and "CUDA error" in str(exc) and "cudaSetDevice" in str(exc)
        return
    assert where["gpu"] != "unknown"
    data = np.arange(12, dtype=np.float32)
    back = np.zeros_like(data)
    ptr = cuda.malloc(data.nbytes)
    cuda.to_device(ptr, data)
    cuda.to_host(back, ptr)
    cuda.free(ptr)
    assert np.array_equal(back, data)
