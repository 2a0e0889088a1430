"""Issue 36, item 5: where a run writes. A suite's `out:` (the suites `layerwise` and `repair` write say `out: .`),
and no run replaces another suite file's results unless `--out` names the folder: not the default folder, not a
suite's `out:`, not a shard's folder, not `merge`'s."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from tests.conftest import run_cli, write_suite

SUITE = """\
name: n
DESCRIPTION
models: {reference: tiny.onnx, candidates: {c: cand.onnx}}
inputs: {generate: {input: {shape: [1, 1, 8, 8]}}}
stages: {layerwise: {}}
"""


def _suites(folder: Path) -> tuple[Path, Path]:
    """Two suite files of one name (so one default folder, reports/n), different files."""
    shutil.copy(folder / "tiny.onnx", folder / "cand.onnx")
    a = write_suite(folder, SUITE.replace("DESCRIPTION", "description: a"), "a.yaml")
    b = write_suite(folder, SUITE.replace("DESCRIPTION", "description: b"), "b.yaml")
    return a, b


def _written(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_a_suite_written_by_layerwise_reruns_into_its_own_folder(tiny_dir: Path, tmp_path: Path):
    """The issue's case: `run reports/lw_int8/suite.yaml` wrote into reports/layerwise-<reference>/, over the
    results of another run there."""
    shutil.copy(tiny_dir / "tiny.onnx", tiny_dir / "cand.onnx")
    assert run_cli("layerwise", "tiny.onnx", "cand.onnx", "-q", cwd=tiny_dir).code == 0  # reports/layerwise-tiny
    first = _written(tiny_dir / "reports" / "layerwise-tiny")
    r = run_cli("layerwise", "tiny.onnx", "cand.onnx", "--out", "reports/lw_int8", "-q", cwd=tiny_dir)
    assert r.code == 0, r.err
    suite = tiny_dir / "reports" / "lw_int8" / "suite.yaml"
    assert yaml.safe_load(suite.read_text())["out"] == "."
    assert run_cli("validate", str(suite)).code == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = run_cli("run", str(suite), cwd=elsewhere)  # from another folder: still its own folder
    assert r.code == 0, r.err
    assert f"results: {suite.parent / 'results.json'}" in r.err
    assert not (elsewhere / "reports").exists()
    assert _written(tiny_dir / "reports" / "layerwise-tiny") == first  # the other run's results are untouched
    rerun = json.loads((suite.parent / "results.json").read_text())
    assert Path(rerun["suite"]["path"]) == suite and rerun["stages"][0]["status"] == "passed"
    r = run_cli("run", "reports/lw_int8/suite.yaml", "-q", cwd=tiny_dir)  # relative, from the suite's project
    assert r.code == 0 and not (tiny_dir / "reports" / "lw_int8" / "reports").exists(), r.err
    # the same for repair's suite (its default folder and the suite's name agree, so --out shows it)
    r = run_cli("repair", "tiny.onnx", "--precision", "fp16", "--out", "reports/rp", "-q", cwd=tiny_dir)
    assert r.code in (0, 1), r.err
    assert yaml.safe_load((tiny_dir / "reports" / "rp" / "suite.yaml").read_text())["out"] == "."


def test_a_run_does_not_replace_another_suites_results(tiny_dir: Path):
    a, b = _suites(tiny_dir)
    assert run_cli("run", "a.yaml", "-q", cwd=tiny_dir).code == 0
    folder = tiny_dir / "reports" / "n"
    before = _written(folder)
    r = run_cli("run", "b.yaml", cwd=tiny_dir)
    assert r.code == 2 and "Traceback" not in r.err, r.err
    assert "reports/n holds the results of another suite file, a.yaml; this run of b.yaml" in r.err
    assert "Pass --out reports/n to replace it, or --out another folder (or set out: in b.yaml)" in r.err
    assert _written(folder) == before  # nothing written, the lock released
    # the same suite file, however named and even edited, replaces its own results
    assert run_cli("run", "./a.yaml", "-q", cwd=tiny_dir).code == 0
    a.write_text(a.read_text().replace("description: a", "description: a, edited"))
    assert run_cli("run", str(a), "-q", cwd=tiny_dir).code == 0
    assert json.loads((folder / "results.json").read_text())["suite"]["description"] == "a, edited"
    # --out naming the folder replaces them
    assert run_cli("run", "b.yaml", "--out", "reports/n", "-q", cwd=tiny_dir).code == 0
    assert json.loads((folder / "results.json").read_text())["suite"]["path"] == "b.yaml"
    # a suite's out: is checked like the default folder
    c = write_suite(tiny_dir, SUITE.replace("DESCRIPTION", "out: reports/n"), "c.yaml")
    r = run_cli("run", str(c), cwd=tiny_dir)
    assert r.code == 2 and "the results of another suite file, b.yaml" in r.err and "(its out: folder)" in r.err


def test_a_results_json_of_no_suite_is_not_replaced(tiny_dir: Path):
    a, _ = _suites(tiny_dir)
    (tiny_dir / "reports" / "n").mkdir(parents=True)
    (tiny_dir / "reports" / "n" / "results.json").write_text("{not json")
    r = run_cli("run", "a.yaml", cwd=tiny_dir)
    assert r.code == 2 and "holds a results.json that names no suite file" in r.err, r.err
    assert (tiny_dir / "reports" / "n" / "results.json").read_text() == "{not json"


def test_the_layerwise_command_does_not_replace_another_suites_results(tiny_dir: Path):
    _suites(tiny_dir)
    other = write_suite(tiny_dir, SUITE.replace("n\n", "layerwise-tiny\n").replace("DESCRIPTION", ""), "o.yaml")
    assert run_cli("run", str(other), "-q", cwd=tiny_dir).code == 0  # into reports/layerwise-tiny
    folder = tiny_dir / "reports" / "layerwise-tiny"
    before = _written(folder)
    r = run_cli("layerwise", "tiny.onnx", "cand.onnx", cwd=tiny_dir)
    assert r.code == 2 and f"the results of another suite file, {other}" in r.err, r.err
    assert _written(folder) == before and not (folder / "suite.yaml").exists()
    assert run_cli("layerwise", "tiny.onnx", "cand.onnx", "--out", str(folder), "-q", cwd=tiny_dir).code == 0
    assert run_cli("layerwise", "tiny.onnx", "cand.onnx", "-q", cwd=tiny_dir).code == 0  # its own: a rerun


def test_shards_and_merge_keep_to_their_own_suite(tiny_dir: Path):
    a, b = _suites(tiny_dir)
    assert run_cli("run", "a.yaml", "-q", cwd=tiny_dir).code == 0  # reports/n, unsharded
    assert run_cli("run", "a.yaml", "--shard", "1/1", "-q", cwd=tiny_dir).code == 0  # reports/n/shard-1-of-1
    shard = tiny_dir / "reports" / "n" / "shard-1-of-1"
    r = run_cli("run", "b.yaml", "--shard", "1/1", cwd=tiny_dir)
    assert r.code == 2 and "reports/n/shard-1-of-1 holds the results of another suite file, a.yaml" in r.err
    # a's shards merge over a's own unsharded results (the same suite)
    assert run_cli("merge", str(shard), "-q", cwd=tiny_dir).code == 0
    merged = json.loads((tiny_dir / "reports" / "n" / "results.json").read_text())
    assert merged["merged"]["shards"] == 1
    # b's shards do not merge over a's results without --out
    assert run_cli("run", "b.yaml", "--shard", "1/1", "--out", "sb", "-q", cwd=tiny_dir).code == 0
    r = run_cli("merge", "sb", cwd=tiny_dir)
    assert r.code == 2 and "reports/n holds the results of another suite file, a.yaml" in r.err, r.err
    assert run_cli("merge", "sb", "--out", "reports/n", "-q", cwd=tiny_dir).code == 0
    # merge writes where the suite's out: says, as the unsharded run would
    c = write_suite(tiny_dir, SUITE.replace("DESCRIPTION", "out: runs/c"), "c.yaml")
    assert run_cli("run", str(c), "--shard", "1/1", "-q", cwd=tiny_dir).code == 0
    assert (tiny_dir / "runs" / "c" / "shard-1-of-1" / "results.json").is_file()
    assert run_cli("merge", "runs/c/shard-1-of-1", "-q", cwd=tiny_dir).code == 0
    assert json.loads((tiny_dir / "runs" / "c" / "results.json").read_text())["merged"]["shards"] == 1
