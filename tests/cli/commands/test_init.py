"""`trtverify init MODEL.onnx`: the suite it writes is accepted by `validate` and executed by `run`
(real subprocesses, real models)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from tests.conftest import ROOT, TINY, run_cli

DEMO = ROOT / "demo" / "fashion_mnist"


def _stages(out: Path) -> dict[str, str]:
    res = json.loads((out / "results.json").read_text())
    assert res["complete"] is True
    return {s["name"]: s["status"] for s in res["stages"]}


def test_init_a_dynamic_batch_model_with_its_pytorch_source_then_validate_and_run(tmp_path: Path):
    for name in ("tiny.onnx", "tiny.pt", "tinymodel.py"):
        shutil.copy(TINY / name, tmp_path / name)
    r = run_cli("init", "tiny.onnx", "--pytorch", "tinymodel:build", "--weights", "tiny.pt", cwd=tmp_path)
    assert r.code == 0, r.err
    text = (tmp_path / "suite.yaml").read_text()
    assert "# dimension 0 ('batch') is dynamic in the model: 1 here" in text
    suite = yaml.safe_load(text)
    assert suite["inputs"]["generate"] == {"input": {"shape": [1, 1, 8, 8], "dtype": "float32", "range": [0, 1]}}
    assert suite["models"]["pytorch"] == {
        "factory": "tinymodel:build",
        "weights": "tiny.pt",
        "output_names": ["logits"],
    }
    assert list(suite["stages"]) == ["framework", "layerwise"]  # e2e and perf are commented-out examples
    assert "#   task: classification" in text and "# perf:" in text

    r = run_cli("validate", "suite.yaml", cwd=tmp_path, block=("torch", "tensorrt"))
    assert r.code == 0 and "ok: suite.yaml" in r.out, r.err
    r = run_cli("run", "suite.yaml", "--out", "o", cwd=tmp_path)
    assert r.code == 0, r.out + r.err
    # no candidate given: an FP16 recipe made from the reference gives layerwise something to compare
    assert _stages(tmp_path / "o") == {"framework": "passed", "layerwise": "passed"}


def test_init_the_demo_model_with_candidates_from_another_folder(tmp_path: Path):
    out = tmp_path / "suites" / "fashion.yaml"
    out.parent.mkdir()
    r = run_cli(
        "init",
        str(DEMO / "fashion_cnn_fp32.onnx"),
        "--candidate",
        str(DEMO / "fashion_cnn_fp16.onnx"),
        "--candidate",
        str(DEMO / "fashion_cnn_int8_qdq.onnx"),
        "-o",
        str(out),
    )
    assert r.code == 0, r.err
    suite = yaml.safe_load(out.read_text())
    assert suite["name"] == "fashion_cnn_fp32"
    cands = suite["models"]["candidates"]
    assert list(cands) == ["fashion_cnn_fp16", "fashion_cnn_int8_qdq"]
    assert (out.parent / cands["fashion_cnn_fp16"]).resolve() == DEMO / "fashion_cnn_fp16.onnx"  # relative to the suite
    assert list(suite["stages"]) == ["layerwise"]
    r = run_cli("validate", str(out))
    assert r.code == 0, r.err
    r = run_cli("run", str(out), "--out", str(tmp_path / "o"))
    assert r.code in (0, 1), r.out + r.err  # random inputs: INT8 may miss the default checks; it ran
    assert _stages(tmp_path / "o")["layerwise"] in ("passed", "failed")


def test_init_refuses_to_overwrite_without_force_and_bad_arguments(tmp_path: Path):
    shutil.copy(TINY / "tiny.onnx", tmp_path / "tiny.onnx")
    (tmp_path / "suite.yaml").write_text("mine\n")
    r = run_cli("init", "tiny.onnx", cwd=tmp_path)
    assert r.code == 2 and "suite.yaml exists; pass --force" in r.err
    assert (tmp_path / "suite.yaml").read_text() == "mine\n"
    r = run_cli("init", "tiny.onnx", "--force", cwd=tmp_path)
    assert r.code == 0 and "layerwise: {}" in (tmp_path / "suite.yaml").read_text()
    r = run_cli("init", "tiny.onnx", "--pytorch", "not a spec", "-o", "x.yaml", cwd=tmp_path)
    assert r.code == 2 and "--pytorch 'not a spec'" in r.err and not (tmp_path / "x.yaml").exists()
    (tmp_path / "bad.onnx").write_bytes(b"\x00garbage")
    r = run_cli("init", "bad.onnx", "-o", "y.yaml", cwd=tmp_path)
    assert r.code == 2 and "bad.onnx" in r.err and "Traceback" not in r.err


def _examples(text: str) -> list[tuple[int, int]]:
    """The commented-out YAML examples of a template: (first line, end) of each `# key: ...` line and the
    deeper-indented `#   ...` lines that continue it."""
    import re

    lines = text.splitlines()
    out = []
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)# ([A-Za-z_][\w]*):", lines[i])
        if m and lines[i].find("# ") == len(m.group(1)):
            j = i + 1
            while j < len(lines) and re.match(rf"^{m.group(1)}#   \S", lines[j]):
                j += 1
            out.append((i, j))
            i = j
        else:
            i += 1
    return out


def _uncomment(text: str, first: int, end: int) -> str:
    """Uncomment one example; one that says 'instead of KEY' replaces that key's block."""
    import re

    lines = text.splitlines()
    indent = len(lines[first]) - len(lines[first].lstrip())
    body = [ln[:indent] + ln[indent + 2 :] for ln in lines[first:end]]
    instead = re.search(r"instead of (\w+)", lines[first])
    out = lines[:first] + body + lines[end:]
    if instead:
        key = instead.group(1)
        start = next(k for k, ln in enumerate(out) if re.match(rf"^{' ' * indent}{key}:", ln))
        stop = start + 1
        while stop < len(out) and out[stop].startswith(" " * (indent + 1)):
            stop += 1
        out = out[:start] + out[stop:]
    return "\n".join(out) + "\n"


def test_every_commented_example_of_the_template_validates_when_uncommented(tmp_path: Path):
    """Issue 26: uncommenting `# arrays: {input: inputs.npz}` gave a validate error. Each commented example is
    uncommented alone (with the files it names made real) and must pass `trtverify validate`."""
    import numpy as np

    for name in ("tiny.onnx", "tiny.pt", "tinymodel.py"):
        shutil.copy(TINY / name, tmp_path / name)
    for name in ("model_int8.onnx", "model.onnx"):
        shutil.copy(TINY / "tiny.onnx", tmp_path / name)
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "inputs.npz", input=rng.uniform(0, 1, (3, 1, 8, 8)).astype(np.float32))
    images = rng.integers(0, 255, (6, 1, 8, 8), dtype=np.uint8)
    np.savez(tmp_path / "val.npz", images=images, labels=np.arange(6) % 2)
    shutil.copy(tmp_path / "tiny.pt", tmp_path / "model.pt")
    for args in ((), ("--pytorch", "tinymodel:build")):
        r = run_cli("init", "tiny.onnx", *args, "-o", "template.yaml", "--force", cwd=tmp_path)
        assert r.code == 0, r.err
        text = (tmp_path / "template.yaml").read_text()
        examples = _examples(text)
        keys = {text.splitlines()[a].split("#", 1)[1].split(":")[0].strip() for a, _ in examples}
        assert {"python_path", "my_int8", "trt_fp16", "file", "e2e", "perf"} <= keys, keys
        assert "needs a GPU and trtexec" not in text  # the perf stage measures ONNX Runtime here
        for first, end in examples:
            variant = tmp_path / f"uncommented_{first}.yaml"
            variant.write_text(_uncomment(text, first, end))
            r = run_cli("validate", variant.name, cwd=tmp_path, block=("torch", "tensorrt"))
            assert r.code == 0, f"uncommenting line {first + 1} ({text.splitlines()[first].strip()}):\n{r.err}"
