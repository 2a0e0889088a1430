"""Issue 36, item 7: a model file that is not ONNX (empty, cut short, text, a folder, missing) is a usage error
(exit 2) naming the file, at every command that takes one and at `validate` (every model the suite names, each
with its line, all at once), before anything is written. A candidate that is ONNX but cannot be run stays the
model under test failing (exit 1, tests/cli/commands/test_commands.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx
import pytest

from tests.conftest import TINY, run_cli, write_suite

# how each kind of bad file is reported (the file's name is checked separately)
KINDS = {
    "empty": "not an ONNX model: the file is empty (0 bytes)",
    "truncated": "the file is truncated",
    "no_opset": "not an ONNX model: no opset_import: the file is cut short or is not an ONNX model",
    "text": "not a readable ONNX model",
    "folder": "is a directory",
    "missing": "does not exist",
}


def _bad(folder: Path, kind: str) -> Path:
    """A file of `kind` named bad_<kind>.onnx, made from the real tiny model where it is cut."""
    path = folder / f"bad_{kind}.onnx"
    raw = (TINY / "tiny.onnx").read_bytes()
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    elif kind == "no_opset":  # cut exactly where the opset_import fields start: a parsable protobuf, no opset
        model = onnx.load(str(TINY / "tiny.onnx"))
        del model.opset_import[:]
        path.write_bytes(model.SerializeToString())
    elif kind == "text":
        path.write_text("ir_version: 8\ngraph { node { op_type: 'Relu' } }\n")  # ONNX's text format is not ONNX
    elif kind == "folder":
        path.mkdir()
    return path


# every command of docs/cli.md that takes an ONNX file, at each place it takes one (BAD: the bad file)
COMMANDS = {
    "convert": ["convert", "BAD", "--precision", "fp16", "-o", "out.onnx"],
    "layerwise-reference": ["layerwise", "BAD", "tiny.onnx"],
    "layerwise-candidate": ["layerwise", "tiny.onnx", "BAD"],
    "repair-reference": ["repair", "BAD", "--precision", "fp16"],
    "repair-candidate": ["repair", "tiny.onnx", "--precision", "fp16", "--candidate", "BAD"],
    "init-model": ["init", "BAD", "-o", "out.yaml"],
    "init-candidate": ["init", "tiny.onnx", "--candidate", "BAD", "-o", "out.yaml"],
}


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_refuses_a_file_that_is_not_onnx(tmp_path: Path, command: str, kind: str):
    shutil.copy(TINY / "tiny.onnx", tmp_path / "tiny.onnx")
    bad = _bad(tmp_path, kind)
    r = run_cli(*[bad.name if a == "BAD" else a for a in COMMANDS[command]], cwd=tmp_path)
    assert r.code == 2, (r.code, r.out, r.err)
    assert bad.name in r.err and KINDS[kind] in r.err and "Traceback" not in r.out + r.err, r.err
    made = {p.name for p in tmp_path.iterdir()} - {"tiny.onnx", bad.name}
    assert made == set(), made  # nothing written: no output model, suite or reports/ folder


def test_validate_reports_every_model_file_that_is_not_what_its_key_says(tmp_path: Path):
    shutil.copy(TINY / "tiny.onnx", tmp_path / "tiny.onnx")
    for kind in ("empty", "truncated", "no_opset", "text"):
        _bad(tmp_path, kind)
    (tmp_path / "weights.pt").write_bytes(b"")
    shutil.copy(TINY / "tiny_script.pt", tmp_path / "script.pt")
    (tmp_path / "script.pt").write_bytes((tmp_path / "script.pt").read_bytes()[:-200])  # the zip's directory cut
    text = (
        "name: v\n"
        "models:\n"
        "  reference: tiny.onnx\n"
        "  pytorch: {factory: 'm:build', weights: weights.pt}\n"
        "  candidates:\n"
        "    a: bad_empty.onnx\n"
        "    b: {path: bad_truncated.onnx}\n"
        "    c: bad_no_opset.onnx\n"
        "    d: bad_text.onnx\n"
        "    ok: tiny.onnx\n"
        "inputs: {generate: {input: {shape: [1, 1, 8, 8]}}}\n"
        "stages: {layerwise: {}}\n"
    )
    suite = write_suite(tmp_path, text, "s.yaml")
    r = run_cli("validate", str(suite))
    assert r.code == 2 and "Traceback" not in r.err, r.err
    lines = r.err.strip().splitlines()
    assert lines == [
        f"{suite}:4: models.pytorch.weights: {tmp_path / 'weights.pt'}: the file is empty (0 bytes)",
        f"{suite}:6: models.candidates.a.path: {tmp_path / 'bad_empty.onnx'}: {KINDS['empty']}",
        f"{suite}:7: models.candidates.b.path: {tmp_path / 'bad_truncated.onnx'}: not a readable ONNX model "
        + lines[2].split("not a readable ONNX model ", 1)[-1],
        f"{suite}:8: models.candidates.c.path: {tmp_path / 'bad_no_opset.onnx'}: {KINDS['no_opset']}",
        f"{suite}:9: models.candidates.d.path: {tmp_path / 'bad_text.onnx'}: not a readable ONNX model "
        + lines[4].split("not a readable ONNX model ", 1)[-1],
    ], r.err
    assert "the file is truncated" in lines[2]
    # the reference broken too: still every problem at once, the reference's first
    suite.write_text(text.replace("reference: tiny.onnx", "reference: bad_empty.onnx"))
    r = run_cli("validate", str(suite))
    assert r.code == 2 and len(r.err.strip().splitlines()) == 6, r.err
    assert r.err.startswith(f"{suite}:3: models.reference: {tmp_path / 'bad_empty.onnx'}: {KINDS['empty']}")
    # torchscript and torch.export files are zip archives: one cut short is named with its line
    suite.write_text(text.replace("factory: 'm:build', weights: weights.pt", "torchscript: script.pt"))
    r = run_cli("validate", str(suite))
    script = tmp_path / "script.pt"
    assert f"{suite}:4: models.pytorch.torchscript: {script}: a zip archive that cannot be read" in r.err, r.err


def test_a_candidate_that_is_onnx_but_cannot_run_passes_validate(tmp_path: Path):
    """The line: ONNX whose external data is missing is read (its weights are never read here) and left to the
    stage, where the model under test fails (exit 1)."""
    model = onnx.load(str(TINY / "tiny.onnx"))
    onnx.save(model, str(tmp_path / "ext.onnx"), save_as_external_data=True, location="ext.bin", size_threshold=0)
    (tmp_path / "ext.bin").unlink()
    shutil.copy(TINY / "tiny.onnx", tmp_path / "tiny.onnx")
    text = (
        "name: v\nmodels: {reference: tiny.onnx, candidates: {c: ext.onnx}}\n"
        "inputs: {generate: {input: {shape: [1, 1, 8, 8]}}}\nstages: {layerwise: {}}\n"
    )
    suite = write_suite(tmp_path, text, "s.yaml")
    r = run_cli("validate", str(suite))
    assert r.code == 0, r.err


def test_onnx_io_walks_the_structure_without_reading_weights(tmp_path: Path):
    from trtverify.graph.onnxinfo import graph_io, load_io, onnx_io
    from trtverify.util.errors import UsageError

    model = onnx.load(str(TINY / "tiny.onnx"))
    onnx.save(model, str(tmp_path / "ext.onnx"), save_as_external_data=True, location="ext.bin", size_threshold=0)
    (tmp_path / "ext.bin").unlink()  # the weights are gone: still an ONNX model, its interface readable
    inputs, outputs = graph_io(onnx_io(tmp_path / "ext.onnx"))
    assert [m.name for m in inputs] == ["input"] and [m.name for m in outputs] == ["logits"]
    with pytest.raises(UsageError, match="which is not beside the model"):  # load_io: can the graph run
        load_io(tmp_path / "ext.onnx")
    for kind in KINDS:
        with pytest.raises(UsageError) as err:
            onnx_io(_bad(tmp_path, kind))
        assert str(err.value).startswith(f"{tmp_path / f'bad_{kind}.onnx'}: ")


def test_parse_log_and_engine_audit_name_a_file_they_cannot_use(tmp_path: Path):
    (tmp_path / "build.log").write_bytes(b"")
    r = run_cli("parse-log", str(tmp_path / "build.log"))
    assert r.code == 2 and f"{tmp_path / 'build.log'}: the file is empty: no build log to read" in r.err, r.err
    (tmp_path / "notes.txt").write_text("not an export\n")
    r = run_cli("engine", "audit", str(tmp_path / "notes.txt"))
    assert r.code == 2 and f"(found: none in {tmp_path / 'notes.txt'})" in r.err, r.err
