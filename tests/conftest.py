"""Shared fixtures: real files, real ONNX Runtime, real PyTorch (CPU)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
TINY = DATA / "tiny"


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory: pytest.TempPathFactory):
    """trtverify's user cache (the compiled report template) in a folder of this test session, not the home of
    whoever runs the tests; runs started from tests inherit it."""
    old = os.environ.get("TRTVERIFY_CACHE_DIR")
    os.environ["TRTVERIFY_CACHE_DIR"] = str(tmp_path_factory.mktemp("user-cache"))
    yield
    if old is None:
        os.environ.pop("TRTVERIFY_CACHE_DIR", None)
    else:
        os.environ["TRTVERIFY_CACHE_DIR"] = old


@dataclass
class CliResult:
    code: int
    out: str
    err: str


def run_cli(*args: str, cwd: Path | None = None, block: tuple[str, ...] = (), timeout: float = 300) -> CliResult:
    """Run `trtverify ARGS` in a fresh interpreter; `block` makes those modules unimportable there.

    Blocking is the one fake here: it stands in for a machine where torch/tensorrt is not installed.
    """
    prelude = "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in block)
    code = prelude + "from trtverify.cli.main import main\nmain(sys.argv[1:])\n"
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env
    )
    return CliResult(p.returncode, p.stdout, p.stderr)


def main_in_process(argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> CliResult:
    """`trtverify ARGV` in this process, without the supervising fork (faster than `run_cli`); the signal handlers
    `main` installs are put back."""
    import signal

    from trtverify.cli.main import main

    monkeypatch.setenv("TRTVERIFY_SUPERVISE", "0")
    capsys.readouterr()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    code = 0
    try:
        main(list(argv))
    except SystemExit as exc:
        code = int(exc.code or 0)
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
    captured = capsys.readouterr()
    return CliResult(code, captured.out, captured.err)


@pytest.fixture
def tiny_dir(tmp_path: Path) -> Path:
    """A private copy of the tiny test models (tests may corrupt or delete them)."""
    dst = tmp_path / "tiny"
    shutil.copytree(TINY, dst)
    return dst


def write_suite(folder: Path, text: str, name: str = "suite.yaml") -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


TINY_SUITE = """\
name: tiny
python_path: [.]
reference_dir: refs
models:
  reference: tiny.onnx
  pytorch: {{factory: "tinymodel:build", weights: tiny.pt, output_names: [logits]}}
inputs:
  samples: {samples}
  generate:
    input: {{shape: [2, 1, 8, 8], range: [-1, 1]}}
stages:
  framework:
    checks:
      - {{metric: cosine, min: 0.99999}}
      - {{metric: rel_l2, max: 1.0e-4}}
"""


@pytest.fixture
def tiny_suite(tiny_dir: Path) -> Path:
    return write_suite(tiny_dir, TINY_SUITE.format(samples=3))


def as_json(record: object) -> dict:
    """A typed result as results.json holds it (non-finite numbers as strings)."""
    import json

    from trtverify.util.fsutil import to_json

    return json.loads(to_json(record.dump()))  # type: ignore[attr-defined]
