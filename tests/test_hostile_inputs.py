"""Hostile files given to every reader trtverify has (issue 21, item 1).

Each reader refuses a file it cannot read with a TrtVerifyError that names the file (exit 2, or 1
for a model under test), in bounded time; never an internal error (exit 4). The hypothesis tests
feed random bytes and truncations of the repository's real files (the seeds) to each reader.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT, run_cli
from trtverify.config.loader import load_suite
from trtverify.config.yamlload import MAX_SUITE_BYTES
from trtverify.errors import SuiteError, TrtVerifyError

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
SUITES = sorted((ROOT / "suites").glob("*.yaml"))


def refused_quickly(fn, *args, limit: float = 1.0) -> TrtVerifyError:
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
def test_hostile_suite_is_refused_in_under_a_second(tmp_path: Path, text: str, message: str):
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
