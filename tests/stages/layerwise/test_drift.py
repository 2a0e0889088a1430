"""Drift against the last release (issue 40, item 5): e2e `max_drop_vs_baseline` and layerwise
`max_increase_vs_baseline` gate on the suite's stored baseline as well as on the reference; only
`run --update-baseline` writes it. Models are small torch exports run in real ONNX Runtime: a release's
candidate is the reference with a class's bias raised so that exactly k of the validation samples (labelled with
the reference's predictions) change class, and for layerwise the reference with its first layer's weights
perturbed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_cli, write_suite

torch = pytest.importorskip("torch")

N = 200


def _export(net, path: Path) -> None:
    torch.onnx.export(net, (torch.zeros(1, 1, 4, 4),), str(path), input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "n"}, "logits": {0: "n"}}, opset_version=17, dynamo=False)  # fmt: skip


def _net(bias_shift: float = 0.0, noise: float = 0.0):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    with torch.no_grad():
        net[3].bias[0] += bias_shift
        net[1].weight += noise * torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
    return net.eval()


@pytest.fixture(scope="module")
def zoo(tmp_path_factory) -> dict:
    """The reference, releases whose candidate moves exactly 2 and 6 of N predictions, and two perturbed ones."""
    d = tmp_path_factory.mktemp("zoo")
    images = np.random.default_rng(0).integers(0, 256, size=(N, 1, 4, 4), dtype=np.uint8)
    x = torch.from_numpy(images.astype(np.float32) / 255)
    with torch.no_grad():
        logits = _net()(x).numpy().astype(np.float64)
    labels = logits.argmax(1)
    np.savez(d / "val.npz", images=images, labels=labels)
    # the bias shift of class 0 that moves exactly k predictions to it: between the k-th and (k+1)-th margins
    margins = np.sort((logits.max(1) - logits[:, 0])[labels != 0])
    assert np.diff(margins[:8]).min() > 1e-4  # far from float32 rounding
    paths = {"ref": d / "ref.onnx"}
    _export(_net(), paths["ref"])
    for k in (2, 6):
        paths[f"flips{k}"] = d / f"flips{k}.onnx"
        _export(_net(bias_shift=float(margins[k - 1] + margins[k]) / 2), paths[f"flips{k}"])
    for noise in (0.002, 0.02):
        paths[f"noise{noise}"] = d / f"noise{noise}.onnx"
        _export(_net(noise=noise), paths[f"noise{noise}"])
    return {"dir": d, **paths}


def _suite(tmp_path: Path, zoo: dict, stage: str, limit: str = "") -> Path:
    cand = tmp_path / "cand.onnx"
    e2e = (
        "  e2e:\n    task: classification\n"
        f"    dataset: {{npz: {zoo['dir'] / 'val.npz'}, layout: NCHW{limit}}}\n    batch_size: 50\n"
        "    gates: [{metric: accuracy, max_drop: 0.05, max_drop_vs_baseline: 0.01}]\n"
    )
    layerwise = "  layerwise:\n    checks: [{metric: rel_l2, max: 0.5}]\n    max_increase_vs_baseline: 0.01\n"
    text = (
        f"name: drift\nreference_dir: {tmp_path / 'refs'}\nmodels:\n  reference: {zoo['ref']}\n"
        f"  candidates: {{release: {cand}}}\n"
        "inputs: {generate: {x: {shape: [4, 1, 4, 4]}}, samples: 2}\n"
        f"stages:\n{e2e if stage == 'e2e' else layerwise}"
    )
    return write_suite(tmp_path, text)


def _release(tmp_path: Path, model: Path) -> None:
    (tmp_path / "cand.onnx").write_bytes(model.read_bytes())


def _stage(out: Path) -> dict:
    return json.loads((out / "results.json").read_text())["stages"][0]


def _run(tmp_path: Path, suite: Path, out: str, *flags: str):
    return run_cli("run", str(suite), "--out", str(tmp_path / out), *flags)


def test_e2e_a_release_within_the_reference_gate_that_lost_against_the_last_one_fails_with_both_numbers(
    tmp_path: Path, zoo: dict
):
    suite = _suite(tmp_path, zoo, "e2e")
    baseline = tmp_path / "refs" / "drift" / "e2e" / "baseline.json"
    _release(tmp_path, zoo["flips2"])
    # no baseline yet: the vs-baseline gate says it did not run, and a run without the flag writes nothing
    r = _run(tmp_path, suite, "o0")
    assert r.code == 0, r.out + r.err
    assert not baseline.exists()
    vs = _stage(tmp_path / "o0")["candidates"][0]["vs_baseline"]["accuracy"]
    assert vs["state"] == "missing" and "write one with trtverify run --update-baseline" in vs["why"]
    assert "max_drop_vs_baseline gates not run for release: no baseline yet" in r.out
    assert not [c for c in _stage(tmp_path / "o0")["checks"] if "vs baseline" in c["name"]]

    # the last release: written only with the flag
    r = _run(tmp_path, suite, "o1", "--update-baseline")
    assert r.code == 0, r.out + r.err
    stored = json.loads(baseline.read_text())
    assert stored["suite"] == "drift" and stored["rows"]["release"]["metrics"]["accuracy"] == pytest.approx(0.99)
    assert len(stored["rows"]["release"]["identity"]["reference_sha256"]) == 64
    assert _stage(tmp_path / "o1")["candidates"][0]["vs_baseline"]["accuracy"]["state"] == "updated"

    # the same release again: compared, passes
    r = _run(tmp_path, suite, "o2")
    assert r.code == 0, r.out + r.err
    vs = _stage(tmp_path / "o2")["candidates"][0]["vs_baseline"]["accuracy"]
    assert vs["state"] == "compared" and vs["baseline"] == pytest.approx(0.99) and vs["change"] == pytest.approx(0)

    # the next release: 0.03 below the reference (gate 0.05 passes), 0.02 below the baseline (gate 0.01 fails)
    _release(tmp_path, zoo["flips6"])
    r = _run(tmp_path, suite, "o3")
    assert r.code == 1, r.out + r.err
    stage = _stage(tmp_path / "o3")
    by_name = {c["name"]: c for c in stage["checks"]}
    assert by_name["release: accuracy drop <= 0.05"]["passed"]
    failed = by_name["release: accuracy drop vs baseline <= 0.01"]
    assert (
        not failed["passed"]
        and failed["value"] == pytest.approx(0.02)
        and failed["metric"] == "accuracy_drop_vs_baseline"
    )
    day = stored["rows"]["release"]["written"][:10]
    sentence = (
        f"accuracy 0.97: 0.03 below the reference 1 (gate 0.05); 0.02 below the baseline 0.99 written {day} (gate 0.01)"
    )
    assert failed["detail"]["reason"] == sentence
    assert f"FAIL release: accuracy drop vs baseline <= 0.01: 0.02 (limit <= 0.01): {sentence}" in r.out
    assert stage["candidates"][0]["passed"] is False
    assert json.loads(baseline.read_text()) == stored  # a run without the flag never rewrites it
    html = (tmp_path / "o3" / "report.html").read_text()
    assert "against the baseline" in html and "0.99" in html


def test_e2e_a_baseline_of_other_data_is_not_compared(tmp_path: Path, zoo: dict):
    _release(tmp_path, zoo["flips2"])
    r = _run(tmp_path, _suite(tmp_path, zoo, "e2e"), "o1", "--update-baseline")
    assert r.code == 0, r.out + r.err
    _release(tmp_path, zoo["flips6"])  # would fail if compared
    r = _run(tmp_path, _suite(tmp_path, zoo, "e2e", limit=", limit: 150"), "o2")
    assert r.code == 0, r.out + r.err
    vs = _stage(tmp_path / "o2")["candidates"][0]["vs_baseline"]["accuracy"]
    assert vs["state"] == "not_comparable" and "samples 200 -> 150" in vs["why"]
    assert "max_drop_vs_baseline gates not run for release: measured against other things (samples 200 -> 150" in r.out
    # a damaged baseline is an error naming the file (exit 2), never a silent pass
    baseline = tmp_path / "refs" / "drift" / "e2e" / "baseline.json"
    baseline.write_text('{"format": 1, "rows": ')
    r = _run(tmp_path, _suite(tmp_path, zoo, "e2e"), "o3")
    assert r.code == 2 and f"{baseline}: unreadable baseline" in r.out + r.err, r.out + r.err


def test_e2e_shards_compare_after_merge(tmp_path: Path, zoo: dict):
    suite = _suite(tmp_path, zoo, "e2e")
    _release(tmp_path, zoo["flips2"])
    assert _run(tmp_path, suite, "b", "--update-baseline").code == 0
    _release(tmp_path, zoo["flips6"])
    stored = (tmp_path / "refs" / "drift" / "e2e" / "baseline.json").read_text()
    for i in (1, 2):  # a shard neither compares (part of the data) nor writes, even with the flag
        r = _run(tmp_path, suite, f"s{i}", "--shard", f"{i}/2", *(["--update-baseline"] if i == 1 else []))
        assert r.code in (0, 1), r.out + r.err
        assert _stage(tmp_path / f"s{i}")["candidates"][0]["vs_baseline"]["accuracy"]["state"] == "sharded"
    assert "baseline not written to" in _stage(tmp_path / "s1")["notes"][-1]
    assert (tmp_path / "refs" / "drift" / "e2e" / "baseline.json").read_text() == stored
    r = run_cli("merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "m"))
    assert r.code == 1, r.out + r.err
    failed = [c for c in _stage(tmp_path / "m")["checks"] if not c["passed"]]
    assert [c["name"] for c in failed] == ["release: accuracy drop vs baseline <= 0.01"]
    assert failed[0]["value"] == pytest.approx(0.02)


def test_layerwise_worst_tensor_grew_beyond_the_baseline_fails_naming_it(tmp_path: Path, zoo: dict):
    suite = _suite(tmp_path, zoo, "layerwise")
    baseline = tmp_path / "refs" / "drift" / "layerwise" / "baseline.json"
    _release(tmp_path, zoo["noise0.002"])
    r = _run(tmp_path, suite, "o0")
    assert r.code == 0, r.out + r.err
    assert not baseline.exists()
    vs = _stage(tmp_path / "o0")["candidates"][0]["vs_baseline"]
    assert vs["state"] == "missing" and "max_increase_vs_baseline not run for release: no baseline yet" in r.out

    assert _run(tmp_path, suite, "o1", "--update-baseline").code == 0
    entry = json.loads(baseline.read_text())["rows"]["release"]
    assert 0 < entry["rel_l2"] < 0.1 and entry["tensor"]

    r = _run(tmp_path, suite, "o2")
    assert r.code == 0, r.out + r.err
    vs = _stage(tmp_path / "o2")["candidates"][0]["vs_baseline"]
    assert vs["state"] == "compared" and vs["change"] == pytest.approx(0, abs=1e-9)

    _release(tmp_path, zoo["noise0.02"])  # still within rel_l2 <= 0.5 against the reference
    r = _run(tmp_path, suite, "o3")
    assert r.code == 1, r.out + r.err
    stage = _stage(tmp_path / "o3")
    failed = [c for c in stage["checks"] if not c["passed"]]
    assert [c["name"] for c in failed] == ["release: worst rel_l2 increase vs baseline <= 0.01"], failed
    vs = stage["candidates"][0]["vs_baseline"]
    assert failed[0]["tensor"] == vs["tensor"] and failed[0]["value"] == pytest.approx(vs["value"] - entry["rel_l2"])
    now, then = re.escape(vs["tensor"]), re.escape(entry["tensor"])
    assert re.search(
        rf"FAIL release: worst rel_l2 increase vs baseline <= 0.01: \S+ \(limit <= 0.01\): at {now}; "
        rf"worst rel_l2 {vs['value']:.4g} at {now}: \S+ above the baseline's {entry['rel_l2']:.4g} "
        rf"at {then} written {entry['written'][:10]} \(gate 0.01\)",
        r.out,
    ), r.out
