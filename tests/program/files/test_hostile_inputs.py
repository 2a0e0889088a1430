"""Hostile files given to every reader trtverify has (issue 21, item 1).

Each reader refuses a file it cannot read with a TrtVerifyError that names the file (exit 2, or 1
for a model under test), in bounded time; never an internal error (exit 4). The hypothesis tests
feed random bytes and truncations of the repository's real files (the seeds) to each reader.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT, run_cli, write_suite
from trtverify.config.loader import load_suite
from trtverify.config.yamlload import MAX_SUITE_BYTES
from trtverify.util.errors import SuiteError, TrtVerifyError, UsageError

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
SUITES = sorted((ROOT / "suites").glob("*.yaml"))


def refused_quickly(fn, *args, limit: float = 3.0) -> TrtVerifyError:
    """`fn(*args)` refuses its input, and soon: a hang, or an expansion such as a billion laughs, takes minutes; the
    refusal itself takes milliseconds, and `limit` leaves room for a machine running 16 test workers (1.13 s seen)."""
    t = time.perf_counter()
    with pytest.raises(TrtVerifyError) as info:
        fn(*args)
    assert time.perf_counter() - t < limit, f"took {time.perf_counter() - t:.2f} s"
    return info.value


# ---- suites -------------------------------------------------------------------------------------


def _alias_bomb(levels: int = 11, width: int = 10) -> str:
    lines = ["a0: &a0 [" + ", ".join(["x"] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(_alias_bomb(), "once aliases are expanded (an alias bomb?)", id="alias-bomb"),
        pytest.param("x: " + "[" * 20000 + "]" * 20000 + "\n", "nested more than 64 levels", id="brackets"),
        pytest.param("x: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n", "nested more than 64 levels", id="mappings"),
        pytest.param("x: &a [*a]\n", "inside its own anchor", id="recursive-alias"),
        pytest.param(
            "a0: &a0 " + "[" * 50 + "]" * 50 + "\n" + "".join(f"a{i}: &a{i} [[[[*a{i - 1}]]]]\n" for i in range(1, 30)),
            "levels deep once aliases are expanded",
            id="deep-through-aliases",
        ),
    ],
)
def test_hostile_suite_is_refused_quickly(tmp_path: Path, text: str, message: str):
    path = tmp_path / "suite.yaml"
    path.write_text(text, encoding="utf-8")
    err = refused_quickly(load_suite, path)
    assert isinstance(err, SuiteError) and err.exit_code == 2
    assert str(err).startswith(f"{path}:") and message in str(err)


def test_huge_suite_is_refused_by_size_before_parsing(tmp_path: Path):
    path = tmp_path / "suite.yaml"
    with open(path, "wb") as fh:  # 60 MB, sparse
        fh.write(b"name: x\n# ")
        fh.seek(60 * 1024 * 1024)
        fh.write(b"\n")
    err = refused_quickly(load_suite, path)
    assert f"larger than {MAX_SUITE_BYTES // 1024} KiB" in str(err)


def test_alias_bomb_through_the_cli_is_exit_2(tmp_path: Path):
    path = tmp_path / "bomb.yaml"
    path.write_text(_alias_bomb(), encoding="utf-8")
    r = run_cli("validate", str(path), timeout=60)
    assert r.code == 2, r.err
    assert "alias bomb" in r.err and "Traceback" not in r.err


def test_aliases_and_merge_keys_of_a_normal_suite_still_load(tmp_path: Path):
    from trtverify.config.yamlload import load_yaml

    path = tmp_path / "s.yaml"
    path.write_text("base: &b {x: 1, y: [1, 2]}\nother:\n  <<: *b\n  z: *b\n", encoding="utf-8")
    assert load_yaml(path).data == {
        "base": {"x": 1, "y": [1, 2]},
        "other": {"x": 1, "y": [1, 2], "z": {"x": 1, "y": [1, 2]}},
    }


def _load_suite_text(tmp: Path, data: bytes) -> None:
    path = tmp / "fuzz.yaml"
    path.write_bytes(data)
    try:
        load_suite(path, check_files=False)
    except SuiteError as exc:
        assert str(exc).startswith(str(path)), str(exc)


@FUZZ
@given(seed=st.sampled_from(SUITES), cut=st.floats(0, 1), junk=st.binary(max_size=64))
def test_fuzz_suites_truncated_and_spliced(tmp_path: Path, seed: Path, cut: float, junk: bytes):
    raw = seed.read_bytes()
    at = int(len(raw) * cut)
    t = time.perf_counter()
    _load_suite_text(tmp_path, raw[:at] + junk + raw[at + len(junk) :])
    assert time.perf_counter() - t < 2


_yaml_scalar = st.one_of(st.integers(), st.floats(allow_nan=False), st.text(max_size=8), st.booleans(), st.none())
_yaml_text = st.lists(
    st.one_of(
        st.sampled_from(
            [
                "[",
                "]",
                "{",
                "}",
                ": ",
                ", ",
                "- ",
                "\n",
                "  ",
                "&a ",
                "*a",
                "&b ",
                "*b",
                "<<: ",
                "!!python/name:os.system ",
                "? ",
                "|",
                ">",
                "'",
                '"',
                "#",
            ]
        ),
        _yaml_scalar.map(str),
    ),
    max_size=60,
).map("".join)


@FUZZ
@given(text=_yaml_text)
def test_fuzz_suites_random_yaml(tmp_path: Path, text: str):
    t = time.perf_counter()
    _load_suite_text(tmp_path, text.encode("utf-8", errors="surrogatepass"))
    assert time.perf_counter() - t < 2


# ---- npz / npy inputs and npz datasets ----------------------------------------------------------

INPUT_SUITE = (
    "name: t\nmodels: {reference: tiny.onnx, candidates: {c: tiny.onnx}}\n"
    "inputs: {file: FILE}\nstages: {layerwise: {}}\n"
)


def _good_npz(path: Path) -> bytes:
    np.savez(path, input=np.zeros((4, 1, 8, 8), np.float32))
    return path.read_bytes()


def _inputs_from(tiny_dir: Path, name: str) -> None:
    from trtverify.data.inputs import build_samples

    loaded = load_suite(write_suite(tiny_dir, INPUT_SUITE.replace("FILE", name)), check_files=False)
    build_samples(loaded)


@pytest.mark.parametrize(
    ("name", "make", "message"),
    [
        ("t.npz", lambda p: p.write_bytes(_good_npz(p)[:200]), "not a readable .npy/.npz file"),
        ("t.npz", lambda p: p.write_bytes(b"PK\x03\x04" + b"\0" * 100), "not a readable .npy/.npz file"),
        ("t.npz", lambda p: p.write_bytes(b"hello, not numpy at all\n"), "not a readable .npy/.npz file"),
        (
            "t.npy",
            lambda p: p.write_bytes(b"\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, "),
            "not a readable",
        ),
        ("t.npz", lambda p: np.savez(p, input=np.array([object()], dtype=object)), "without pickle"),
        ("t.npz", lambda p: np.savez(p, input=np.array(["a", "b"])), "has dtype <U1"),
        ("t.npz", lambda p: np.savez(p, input=np.zeros(3, dtype=[("a", "f4")])), "has dtype"),
    ],
    ids=["truncated", "zip-header-only", "text", "npy-header-cut", "object", "strings", "structured"],
)
def test_hostile_inputs_file_is_a_usage_error_naming_it(tiny_dir: Path, name: str, make, message: str):
    from trtverify.util.errors import UsageError

    make(tiny_dir / name)
    if name.endswith(".npy"):
        with pytest.raises(TrtVerifyError) as info:
            loaded = load_suite(
                write_suite(tiny_dir, INPUT_SUITE.replace("{file: FILE}", "{file: t.npy, arrays: {input: {}}}")),
                check_files=False,
            )
            from trtverify.data.inputs import build_samples

            build_samples(loaded)
    else:
        with pytest.raises(UsageError) as info:
            _inputs_from(tiny_dir, name)
    assert str(info.value).startswith(str(tiny_dir / name)) and message in str(info.value)
    assert info.value.exit_code == 2


def test_truncated_npz_through_the_cli_is_exit_2(tiny_dir: Path):
    p = tiny_dir / "t.npz"
    p.write_bytes(_good_npz(p)[:300])
    r = run_cli("run", str(write_suite(tiny_dir, INPUT_SUITE.replace("FILE", "t.npz"))), "--out", str(tiny_dir / "o"))
    assert r.code == 2, r.out + r.err
    assert "t.npz: not a readable .npy/.npz file" in r.err and "Traceback" not in r.err


@FUZZ
@given(cut=st.floats(0, 1), flip=st.integers(0, 10_000), byte=st.integers(0, 255))
def test_fuzz_npz_inputs_truncated_and_flipped(tiny_dir: Path, cut: float, flip: int, byte: int):
    p = tiny_dir / "t.npz"
    raw = bytearray(_good_npz(p))
    raw[flip % len(raw)] = byte
    p.write_bytes(bytes(raw[: max(1, int(len(raw) * cut))]))
    try:
        _inputs_from(tiny_dir, "t.npz")
    except TrtVerifyError as exc:
        assert exc.exit_code == 2 and str(exc).startswith(str(p)), str(exc)


def test_hostile_npz_dataset(tmp_path: Path):
    from trtverify.config.stages import Dataset
    from trtverify.tasks.datasets import open_dataset

    p = tmp_path / "d.npz"
    np.savez(p, images=np.zeros((4, 8, 8, 3), np.uint8), labels=np.arange(4))
    raw = p.read_bytes()
    p.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(TrtVerifyError, match=f"^{p}: not a readable .npz file"):
        open_dataset(Dataset(npz=p))
    np.savez(p, images=np.zeros((4, 8, 8, 3), np.uint8), labels=np.array(["a", "b", "c", "d"]))
    with pytest.raises(TrtVerifyError, match=f"^{p}: array 'labels' has dtype <U1"):
        open_dataset(Dataset(npz=p))
    np.savez(p, images=np.zeros((4, 8, 8, 3), np.uint8), labels=np.array(3))
    with pytest.raises(TrtVerifyError, match="one label per image"):
        open_dataset(Dataset(npz=p))


# ---- images -------------------------------------------------------------------------------------


def _png_header(width: int, height: int) -> bytes:
    """A PNG that declares `width` x `height` RGB pixels and holds none: a decompression bomb's header."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IEND", b"")
    )


def _real_png(path: Path, size: tuple[int, int] = (16, 16)) -> bytes:
    from PIL import Image

    Image.fromarray(np.random.default_rng(0).integers(0, 255, size, dtype=np.uint8)).save(path)  # L: a mask too
    return path.read_bytes()


@pytest.mark.parametrize("reader", ["_read_image", "read_mask"])
@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p.write_bytes(_png_header(100_000, 100_000)), "decompression bomb"),
        (lambda p: p.write_bytes(_png_header(15_000, 15_000)), "decompression bomb"),  # PIL only warns here
        (lambda p: p.write_bytes(_real_png(p)[:100]), "cannot read"),
        (lambda p: p.write_bytes(b"GIF89a" + b"\xff" * 20), "cannot read"),
        (lambda p: p.write_bytes(b""), "cannot read"),
    ],
    ids=["bomb", "bomb-warning-range", "truncated", "garbage-gif", "empty"],
)
def test_hostile_image_is_a_usage_error_naming_it(tmp_path: Path, reader: str, make, message: str):
    from trtverify.tasks import datasets

    p = tmp_path / "x.png"
    make(p)
    err = refused_quickly(getattr(datasets, reader), p)
    assert err.exit_code == 2 and str(err).startswith(f"{p}: ") and message in str(err)


@FUZZ
@given(cut=st.integers(0, 2000), flip=st.integers(0, 2000), byte=st.integers(0, 255))
def test_fuzz_images_truncated_and_flipped(tmp_path: Path, cut: int, flip: int, byte: int):
    from trtverify.tasks.datasets import _read_image

    seed = sorted((ROOT / "demo" / "shapes" / "val").rglob("*.png"))[0]
    raw = bytearray(seed.read_bytes())
    raw[flip % len(raw)] = byte
    p = tmp_path / "x.png"
    p.write_bytes(bytes(raw[: len(raw) - cut % len(raw)]))
    try:
        _read_image(p)
    except TrtVerifyError as exc:
        assert str(exc).startswith(f"{p}: "), str(exc)


# ---- results.json for report and merge ----------------------------------------------------------


@pytest.fixture(scope="module")
def real_results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The results.json of a real (tiny) run: the seed the tampering starts from."""
    import json
    import shutil

    folder = tmp_path_factory.mktemp("run")
    shutil.copy(ROOT / "tests" / "data" / "tiny" / "tiny.onnx", folder)
    suite = INPUT_SUITE.replace("{file: FILE}", "{generate: {input: {shape: [2, 1, 8, 8]}}}")
    r = run_cli("run", str(write_suite(folder, suite)), "--out", str(folder / "out"), "-q")
    assert r.code == 0, r.out + r.err
    return json.loads((folder / "out" / "results.json").read_text(encoding="utf-8"))


def _write_json(path: Path, data: object) -> Path:
    import json

    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        (lambda d: {**d, "schema_version": 99}, "results of schema version 99; this trtverify reads version"),
        (lambda d: {k: v for k, v in d.items() if k != "schema_version"}, "schema version None"),
        (lambda d: {**d, "stages": 5}, "not a valid results.json (1 problem(s): stages"),
        (lambda d: {**d, "suite": None}, "not a valid results.json"),
        (lambda d: [d], "not a trtverify results.json"),
        (lambda d: "[" * 100_000 + "]" * 100_000, "nested too deeply"),
        (lambda d: "{not json", "not valid JSON"),
        (lambda d: "\0\0\0", "not valid JSON"),
    ],
    ids=["schema-99", "no-schema", "stages-int", "suite-null", "list", "deep", "not-json", "nul"],
)
def test_tampered_results_are_refused_naming_the_file(tmp_path: Path, real_results: dict, tamper, message: str):
    from trtverify.results.io import load_results

    data = tamper(real_results)
    p = tmp_path / "results.json"
    if isinstance(data, str):
        p.write_text(data, encoding="utf-8")
    else:
        _write_json(p, data)
    err = refused_quickly(load_results, p)
    assert err.exit_code == 2 and str(err).startswith(f"{p}: ") and message in str(err), str(err)


def test_huge_results_are_refused_by_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from trtverify.results import io

    monkeypatch.setattr(io, "MAX_RESULTS_BYTES", 1000)
    p = tmp_path / "results.json"
    p.write_text(" " * 2000 + "{}", encoding="utf-8")
    assert "larger than" in str(refused_quickly(io.load_results, p))


def test_report_and_merge_of_another_schema_version_are_exit_2(tmp_path: Path, real_results: dict):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        _write_json(tmp_path / name / "results.json", {**real_results, "schema_version": 1})
    r = run_cli("report", str(tmp_path / "a" / "results.json"))
    assert r.code == 2 and "results of schema version 1; this trtverify reads version" in r.err, r.err
    r = run_cli("merge", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "m"))
    assert r.code == 2 and "schema version 1" in r.err and "Traceback" not in r.err, r.err


def _leaves(data: object, path: tuple = ()) -> list[tuple]:
    if isinstance(data, dict):
        return [path] + [p for k, v in data.items() for p in _leaves(v, (*path, k))]
    if isinstance(data, list):
        return [path] + [p for i, v in enumerate(data) for p in _leaves(v, (*path, i))]
    return [path]


_json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


@FUZZ
@given(pick=st.integers(0, 10**6), value=_json_value)
def test_fuzz_results_with_one_value_replaced(tmp_path: Path, real_results: dict, pick: int, value: object):
    """Any one value of a real results.json replaced: it loads and renders, or is refused naming the file."""
    import copy

    from trtverify.report.html import write_report
    from trtverify.results.io import load_results

    data = copy.deepcopy(real_results)
    leaves = _leaves(data)[1:]
    path = leaves[pick % len(leaves)]
    node = data
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    p = _write_json(tmp_path / "results.json", data)
    try:
        results = load_results(p)
    except TrtVerifyError as exc:
        assert exc.exit_code == 2 and str(exc).startswith(f"{p}: "), str(exc)
        return
    write_report(results, tmp_path / "report.html")


# ---- build logs, trtexec exports and console logs -----------------------------------------------

LOGS = sorted((ROOT / "tests" / "data" / "buildlogs").glob("*.log")) + sorted(
    (ROOT / "tests" / "data" / "trtexec_logs").glob("*.log")
)


def test_binary_build_log_is_refused_naming_the_file_and_line(tmp_path: Path):
    from trtverify.buildlog.parser import parse_file

    p = tmp_path / "build.log"
    p.write_bytes(b"[I] TensorRT version: 10.4.0\n[I] building\n\x7fELF\x00\x00\x01")
    err = refused_quickly(parse_file, p)
    assert str(err).startswith(f"{p}: a NUL byte on line 3: a binary file, not a build log")


def test_utf16_build_log_from_powershell_is_read(tmp_path: Path):
    from trtverify.buildlog.parser import parse_file

    p = tmp_path / "build.log"
    text = LOGS[0].read_text(encoding="utf-8", errors="replace")
    p.write_bytes(text.encode("utf-16"))  # with a BOM, as PowerShell's '>' writes it
    assert parse_file(p) == parse_file(LOGS[0])


def test_huge_build_log_is_refused_by_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from trtverify.buildlog import parser

    monkeypatch.setattr(parser, "MAX_LOG_BYTES", 1000)
    p = tmp_path / "build.log"
    p.write_text("[I] x\n" * 1000, encoding="utf-8")
    assert "larger than" in str(refused_quickly(parser.parse_file, p))


def test_binary_build_log_in_the_cli_is_exit_2(tmp_path: Path):
    p = tmp_path / "build.log"
    p.write_bytes(b"\x00" * 64)
    r = run_cli("parse-log", str(p))
    assert r.code == 2 and "a binary file, not a build log" in r.err and "Traceback" not in r.err, r.err


@FUZZ
@given(seed=st.sampled_from(LOGS), cut=st.floats(0, 1), junk=st.binary(max_size=32))
def test_fuzz_build_logs_truncated_and_spliced(tmp_path: Path, seed: Path, cut: float, junk: bytes):
    from trtverify.buildlog.parser import parse_file

    raw = seed.read_bytes()
    at = int(len(raw) * cut)
    p = tmp_path / "build.log"
    p.write_bytes(raw[:at] + junk)
    t = time.perf_counter()
    try:
        parse_file(p)
    except TrtVerifyError as exc:
        assert exc.exit_code == 2 and str(exc).startswith(f"{p}: ") and b"\0" in junk, str(exc)
    assert time.perf_counter() - t < 5


EXPORTS = ROOT / "tests" / "data" / "engine_exports" / "fp16"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\x00\x01\x02 binary", "not a JSON trtexec export"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'[{"count": 1}, {"name": "conv", "averageMs": "fast"}]', "averageMs must be a number"),
    ],
    ids=["binary", "deep", "averageMs-string"],
)
def test_hostile_trtexec_export_is_a_usage_error(tmp_path: Path, content: bytes, message: str):
    from trtverify.engine.exports import read_profile

    p = tmp_path / "x.profile.json"
    p.write_bytes(content)
    err = refused_quickly(read_profile, p)
    assert str(err).startswith(f"{p}: ") and message in str(err), str(err)


def test_huge_trtexec_export_is_refused_by_size(tmp_path: Path):
    from trtverify.engine.exports import MAX_BYTES, load_json

    p = tmp_path / "x.graph.json"
    with open(p, "wb") as fh:  # sparse
        fh.seek(MAX_BYTES + 1)
        fh.write(b"\n")
    assert "larger than a trtexec export" in str(refused_quickly(load_json, p))


def test_binary_trtexec_console_log_is_refused(tmp_path: Path):
    from trtverify.engine.audit import audit

    p = tmp_path / "trtexec.log"
    p.write_bytes(b"&&&& RUNNING TensorRT.trtexec\n\x00\x00\x00")
    assert "a binary file, not a trtexec console log" in str(refused_quickly(audit, [p]))


@FUZZ
@given(seed=st.sampled_from(sorted(EXPORTS.glob("*.json"))), cut=st.floats(0, 1), junk=st.binary(max_size=16))
def test_fuzz_trtexec_exports_truncated(tmp_path: Path, seed: Path, cut: float, junk: bytes):
    import shutil

    from trtverify.engine.audit import audit

    folder = tmp_path / "engine"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(EXPORTS, folder)
    raw = seed.read_bytes()
    (folder / seed.name).write_bytes(raw[: int(len(raw) * cut)] + junk)
    try:
        audit([folder])
    except TrtVerifyError as exc:
        assert exc.exit_code == 2, str(exc)


# ---- ONNX models: the reference (preflight, exit 2) and a candidate (the model under test, exit 1) ----


def _onnx_models(folder: Path) -> dict[str, Path]:
    """Real ONNX files, hostile in one way each: truncated, a cycle, external data missing."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def model(nodes: list, inits: list = ()) -> onnx.ModelProto:
        graph = helper.make_graph(
            nodes,
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
            initializer=list(inits),
        )
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        m.ir_version = 8
        return m

    weight = numpy_helper.from_array(np.eye(3, dtype=np.float32), "W")
    good = model([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")], [weight])
    out = {name: folder / f"{name}.onnx" for name in ("good", "truncated", "cyclic", "external")}
    onnx.save(good, str(out["good"]))
    raw = out["good"].read_bytes()
    out["truncated"].write_bytes(raw[: len(raw) - 20])
    cyclic = [
        helper.make_node("Add", ["x", "b"], ["a"], name="n1"),
        helper.make_node("Relu", ["a"], ["b"], name="n2"),
        helper.make_node("Identity", ["a"], ["y"], name="n3"),
    ]
    onnx.save(model(cyclic), str(out["cyclic"]))
    onnx.save(good, str(out["external"]), save_as_external_data=True, location="external.bin", size_threshold=0)
    (folder / "external.bin").unlink()
    return out


ONNX_CASES = {
    "truncated": "is truncated",
    "cyclic": "the graph has a cycle: 3 node(s) on or after it, e.g. n1, n2, n3",
    "external": "tensor 'W' is stored in external data file 'external.bin', which is not beside the model",
}
ONNX_SUITE = (
    "name: t\nmodels: {reference: REF, candidates: {c: CAND}}\n"
    "inputs: {generate: {x: {shape: [2, 3]}}}\nstages: {layerwise: {}}\n"
)


@pytest.mark.parametrize("case", list(ONNX_CASES))
def test_hostile_reference_model_is_a_suite_error_at_preflight(tmp_path: Path, case: str):
    from trtverify.runner import preflight

    models = _onnx_models(tmp_path)
    suite = write_suite(tmp_path, ONNX_SUITE.replace("REF", models[case].name).replace("CAND", "good.onnx"))
    err = refused_quickly(preflight, load_suite(suite))
    assert isinstance(err, SuiteError) and err.exit_code == 2
    assert f"models.reference: {models[case]}: " in str(err) and ONNX_CASES[case] in str(err), str(err)


@pytest.mark.parametrize("case", list(ONNX_CASES))
def test_hostile_candidate_model_is_a_backend_error(tmp_path: Path, case: str):
    from trtverify.backends.onnxruntime import OnnxRuntimeBackend
    from trtverify.config.backends import Backends
    from trtverify.util.errors import BackendError

    models = _onnx_models(tmp_path)
    err = refused_quickly(lambda: OnnxRuntimeBackend.from_config(models[case], Backends()).load())
    assert isinstance(err, BackendError) and err.exit_code == 1
    assert str(models[case]) in str(err) and ONNX_CASES[case] in str(err), str(err)


def test_hostile_models_through_the_cli(tmp_path: Path):
    models = _onnx_models(tmp_path)
    ref_bad = write_suite(tmp_path, ONNX_SUITE.replace("REF", "external.onnx").replace("CAND", "good.onnx"), "a.yaml")
    r = run_cli("run", str(ref_bad), "--out", str(tmp_path / "a"))
    assert r.code == 2 and "which is not beside the model" in r.err and "Traceback" not in r.err, r.err
    cand_bad = write_suite(tmp_path, ONNX_SUITE.replace("REF", "good.onnx").replace("CAND", "external.onnx"), "b.yaml")
    r = run_cli("run", str(cand_bad), "--out", str(tmp_path / "b"))
    assert r.code == 1 and "which is not beside the model" in r.out + r.err and "Traceback" not in r.err, r.err
    assert models


ONNX_SEEDS = [ROOT / "tests" / "data" / "tiny" / "tiny.onnx", ROOT / "demo" / "fashion_mnist" / "fashion_cnn_fp32.onnx"]


@FUZZ
@given(seed=st.sampled_from(ONNX_SEEDS), cut=st.floats(0, 1), flip=st.integers(0, 10**7), byte=st.integers(0, 255))
def test_fuzz_onnx_truncated_and_flipped(tmp_path: Path, seed: Path, cut: float, flip: int, byte: int):
    from trtverify.graph.onnxinfo import graph_io, load_io

    raw = bytearray(seed.read_bytes())
    raw[flip % len(raw)] = byte
    p = tmp_path / "m.onnx"
    p.write_bytes(bytes(raw[: int(len(raw) * cut)]))
    t = time.perf_counter()
    try:
        graph_io(load_io(p))
    except TrtVerifyError as exc:
        assert exc.exit_code == 2 and str(exc).startswith(f"{p}: "), str(exc)
    assert time.perf_counter() - t < 2


# ---- COCO annotations ---------------------------------------------------------------------------

COCO_SEED = ROOT / "demo" / "shapes" / "val" / "instances.json"


def _open_coco(path: Path) -> None:
    from trtverify.config.stages import Dataset
    from trtverify.tasks.datasets import open_dataset

    open_dataset(Dataset(coco=path, images=COCO_SEED.parent / "images"))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\x89PNG not json", "not UTF-8 JSON"),
        (b"{'images': []}", "not valid JSON (line 1, column 2)"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b"[]", "a COCO file holds a JSON object, got list"),
        (b'{"images": [], "annotations": {}}', "'annotations' must be a list, got dict; missing key 'categories'"),
        (b'{"images": [{"id": "one"}], "annotations": [], "categories": []}', "images[0] 'id' must be an integer"),
    ],
    ids=["binary", "python-dict", "deep", "list", "structure", "id-type"],
)
def test_hostile_coco_file_is_a_usage_error_naming_the_file_and_key(tmp_path: Path, content: bytes, message: str):
    p = tmp_path / "instances.json"
    p.write_bytes(content)
    err = refused_quickly(_open_coco, p)
    assert err.exit_code == 2 and str(err).startswith(f"{p}: ") and message in str(err), str(err)


def test_huge_coco_file_is_refused_by_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from trtverify.tasks import coco

    monkeypatch.setattr(coco, "MAX_COCO_BYTES", 1000)
    p = tmp_path / "instances.json"
    p.write_bytes(COCO_SEED.read_bytes())
    assert "larger than" in str(refused_quickly(_open_coco, p))


@FUZZ
@given(pick=st.integers(0, 10**6), value=_json_value)
def test_fuzz_coco_with_one_value_replaced(tmp_path: Path, pick: int, value: object):
    import json

    data = json.loads(COCO_SEED.read_text(encoding="utf-8"))
    data["images"], data["annotations"] = data["images"][:3], data["annotations"][:6]
    leaves = _leaves(data)[1:]
    path = leaves[pick % len(leaves)]
    node = data
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    p = _write_json(tmp_path / "instances.json", data)
    try:
        _open_coco(p)
    except TrtVerifyError as exc:
        assert exc.exit_code == 2 and str(exc).startswith(f"{p}: "), str(exc)


@FUZZ
@given(cut=st.floats(0, 1), junk=st.binary(max_size=16))
def test_fuzz_coco_truncated(tmp_path: Path, cut: float, junk: bytes):
    raw = COCO_SEED.read_bytes()
    p = tmp_path / "instances.json"
    p.write_bytes(raw[: int(len(raw) * cut)] + junk)
    try:
        _open_coco(p)
    except TrtVerifyError as exc:
        assert exc.exit_code == 2 and str(exc).startswith(f"{p}: "), str(exc)


def test_truncated_npz_for_repair_and_a_damaged_shard_state_are_exit_2(tmp_path: Path):
    """The other .npz readers: `trtverify repair --inputs` and `merge` of a shard whose e2e state is damaged."""
    good = tmp_path / "good.npz"
    np.savez(good, input=np.zeros((2, 1, 28, 28), np.float32))
    bad = tmp_path / "bad.npz"
    bad.write_bytes(good.read_bytes()[:200])
    ref = ROOT / "demo" / "fashion_mnist" / "fashion_cnn_fp32.onnx"
    r = run_cli("repair", str(ref), "--precision", "fp16", "--inputs", str(bad), "--out", str(tmp_path / "o"))
    assert r.code == 2 and str(bad) in r.err and "not a readable" in r.err, r.err
    from trtverify.stages.e2e.stage import _load_state

    with pytest.raises(UsageError, match="not a shard's accumulator state"):
        _load_state(bad)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


LAYER_KEYS = ["Inputs", "Outputs", "OutMaps", "Weights", "Metadata", "Name", "LayerType"]


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(st.integers(0, 36), st.sampled_from(LAYER_KEYS), JSON_VALUES)
def test_fuzz_layer_info_with_one_field_replaced(tmp_path: Path, index: int, key: str, value: object):
    """Any JSON value in any field of a real --exportLayerInfo layer: the audit reads it or exits 2, never 4."""
    import json

    from trtverify.engine.audit import audit

    data = json.loads((ROOT / "tests/data/engine_exports/qat/resnet-qat.onnx.engine.graph.json").read_text())
    data["Layers"][index % len(data["Layers"])][key] = value
    path = tmp_path / "fuzz.engine.graph.json"
    path.write_text(json.dumps(data))
    try:
        audit([path])
    except UsageError as exc:
        assert str(path) in str(exc)


def _external_model(folder: Path, location: str) -> Path:
    """x @ W with W stored as external data at `location` (relative to the model's folder)."""
    import onnx
    from onnx import TensorProto, helper

    w = helper.make_tensor("W", TensorProto.FLOAT, [4, 4], [0.0] * 16)
    w.ClearField("float_data")
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", "64")):
        entry = w.external_data.add()
        entry.key, entry.value = k, v
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [w],
    )
    path = folder / "model.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), str(path))
    return path


@pytest.mark.parametrize(
    "location, why",
    [
        ("../../../../../../../../etc/passwd", "points outside the model's folder"),
        ("/etc/hostname", "is an absolute path"),
        ("link.bin", "points outside the model's folder"),  # a symlink leaving the folder
    ],
)
def test_external_data_outside_the_models_folder_is_refused_before_reading(tmp_path: Path, location: str, why: str):
    """Issue 28 item 7: trtverify's own weight reader followed any `location`; the run then ended in exit 4 when
    onnx refused the same path later. Refused up front, naming the model and the tensor: exit 1 for a candidate,
    exit 2 for the reference (as for any unreadable model)."""
    bad = tmp_path / "bad"
    bad.mkdir()
    outside = tmp_path / "outside.bin"
    outside.write_bytes(bytes(64))
    (bad / "link.bin").symlink_to(outside)
    model = _external_model(bad, location)
    good = tmp_path / "good.onnx"
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor("W", TensorProto.FLOAT, [4, 4], [0.5] * 16)],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), str(good))
    r = run_cli("layerwise", str(good), str(model), "--out", str(tmp_path / "c"))
    assert r.code == 1 and "Traceback" not in r.out + r.err, r.out + r.err
    assert f"tensor 'W': external data location '{location}' {why}" in r.out and "model.onnx" in r.out
    r = run_cli("layerwise", str(model), str(good), "--out", str(tmp_path / "r"))
    assert r.code == 2 and "Traceback" not in r.out + r.err, r.out + r.err
    assert f"external data location '{location}' {why}" in r.err


def test_external_data_inside_the_folder_still_loads(tmp_path: Path):
    weights = np.arange(16, dtype=np.float32).reshape(4, 4)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "w.bin").write_bytes(weights.tobytes())
    model = _external_model(tmp_path, "sub/w.bin")
    from trtverify.graph.onnxwire import graph_problem

    assert graph_problem(model) is None


def test_inputs_that_make_the_reference_nonfinite_are_named(tmp_path: Path):
    """Issue 28 item 8: a NaN in the inputs file ended in `FAIL ...: nan` with no word on why. The stage says which
    input rows hold NaN/inf and that the metrics there are undefined because of them; the failing checks name a
    tensor with nothing finite to measure, not a passing one."""
    import json

    x = np.random.default_rng(0).uniform(0, 1, (3, 1, 28, 28)).astype(np.float32)
    x[1, 0, 3, 3] = np.nan
    np.savez(tmp_path / "in.npz", input=x)
    demo = ROOT / "demo" / "fashion_mnist"
    r = run_cli("layerwise", str(demo / "fashion_cnn_fp32.onnx"), str(demo / "fashion_cnn_fp16.onnx"),
                "--inputs", str(tmp_path / "in.npz"), "--out", str(tmp_path / "o"))  # fmt: skip
    assert r.code == 1
    assert "the inputs hold NaN or inf values (input 'input' in sample 1)" in r.out
    stage = json.loads((tmp_path / "o" / "results.json").read_text())["stages"][0]
    failed = [c for c in stage["checks"] if not c["passed"] and c["metric"] == "rel_l2"]
    assert failed and failed[0]["value"] is None and failed[0]["tensor"] == "/classifier/fc1/Gemm_output_0"
