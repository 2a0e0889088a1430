"""`import trtverify` and `trtverify --help` must not import torch or tensorrt; every module imports without them."""

from __future__ import annotations

import os
import pkgutil
import subprocess
import sys
import time

import trtverify
from tests.conftest import ROOT, run_cli

MODULES = sorted(
    m.name for m in pkgutil.walk_packages(trtverify.__path__, "trtverify.") if m.name != "trtverify.__main__"
)
HEAVY = ("torch", "tensorrt", "tensorrt_rtx", "polygraphy")


def _python(code: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_every_module_imports_alone_in_a_fresh_interpreter():
    """Importing every module in one interpreter (in sorted order) hides import cycles: a module
    imported first by a sibling loads fine, and alone it fails ('partially initialized module')."""
    from concurrent.futures import ThreadPoolExecutor

    def alone(module: str) -> tuple[str, int, str]:
        p = _python(f"import {module}")
        return module, p.returncode, p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""

    with ThreadPoolExecutor(max_workers=max(2, (os.cpu_count() or 2))) as pool:
        failed = [(m, err) for m, code, err in pool.map(alone, MODULES) if code != 0]
    assert not failed, failed


def test_every_module_imports_with_heavy_libraries_unimportable():
    assert len(MODULES) > 15
    block = "".join(f"sys.modules[{m!r}] = None\n" for m in HEAVY)
    code = (
        "import importlib, sys\n"
        + block
        + "".join(f"importlib.import_module({m!r})\n" for m in MODULES)
        + "print('ok')"
    )
    p = _python(code)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr


def test_help_imports_neither_torch_nor_tensorrt_and_is_fast():
    code = (
        "import sys, time\nt = time.perf_counter()\nfrom trtverify.cli.main import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in sys.modules\n"
        "         if m.split('.')[0] in ('torch', 'tensorrt', 'tensorrt_rtx', 'polygraphy', 'onnxruntime')]\n"
        "print('HEAVY', heavy, 'T', time.perf_counter() - t)\n"
    )
    p = _python(code)
    assert p.returncode == 0, p.stderr
    line = [x for x in p.stdout.splitlines() if x.startswith("HEAVY")][0]
    assert line.startswith("HEAVY [] T"), line
    assert float(line.split()[-1]) < 0.5


def test_help_subprocess_wall_time():
    t = time.perf_counter()
    r = run_cli("--help")
    assert r.code == 0 and "Exit codes" in r.out
    assert time.perf_counter() - t < 3.0  # interpreter start included; --help itself is measured above


def test_import_trtverify_is_light():
    p = _python(
        "import sys, trtverify\n"
        "heavy = ('torch', 'tensorrt', 'onnxruntime', 'onnx', 'pydantic')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))"
    )
    assert p.stdout.strip() == "[]", p.stdout


def test_a_layerwise_run_needs_none_of_the_other_stages_modules(tmp_path):
    """The results document and the report load a stage's module only where its result is present: a layerwise
    run writes results.json and its report with the build-log parser, the repair search, the e2e tasks and the
    engine audit unimportable (about 0.1 s of imports it no longer pays); reading the results back needs them."""
    from tests.cli.commands.test_commands import DEMO

    fp32, fp16 = (str(DEMO / f"fashion_cnn_{p}.onnx") for p in ("fp32", "fp16"))
    others = ("trtverify.buildlog", "trtverify.repair", "trtverify.stages.e2e", "trtverify.engine", "trtverify.tasks")
    r = run_cli("layerwise", fp32, fp16, "--out", str(tmp_path / "o"), block=others)
    assert r.code == 0, r.err
    assert (tmp_path / "o" / "report.html").stat().st_size > 0
    from trtverify.results.io import load_results

    assert load_results(tmp_path / "o" / "results.json").stages[0].name == "layerwise"
