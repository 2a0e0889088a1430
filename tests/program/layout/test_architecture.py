"""Rules of the layout that import-linter cannot see (its layer contracts live in pyproject.toml
and run in `make test` as `lint-imports`): small modules, one place that prints, packages whose
__init__ holds only a docstring. Each check walks the real source tree with `ast`."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

PACKAGE = ROOT / "trtverify"
# the package's modules: files in folders that are packages (trtverify/data/kitfiles/ holds a standalone script that
# `trtverify capture` copies into a kit, never imported: it runs on the target machine, prints, and is one file)
SOURCES = sorted(
    p
    for p in PACKAGE.rglob("*.py")
    if all((d / "__init__.py").is_file() for d in p.parents if PACKAGE in (d, *d.parents))
)
# the .py files the package ships but never imports (trtverify/data/kitfiles/): held to the same size rule
SCRIPTS = sorted(set(PACKAGE.rglob("*.py")) - set(SOURCES))
MAX_LINES = 500


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def test_the_walk_sees_the_package():
    assert len(SOURCES) > 60 and PACKAGE / "cli" / "main.py" in SOURCES
    assert PACKAGE / "data" / "kitfiles" / "run_engine.py" in SCRIPTS


def _over_the_limit(paths: list[Path]) -> dict[Path, int]:
    return {p: n for p in paths if (n := len(p.read_text().splitlines())) > MAX_LINES}


def test_no_module_over_500_lines():
    """Modules and the scripts the package ships (a kit's run_engine.py must stay one file, so it must stay small)."""
    long = {str(p.relative_to(ROOT)): n for p, n in _over_the_limit([*SOURCES, *SCRIPTS]).items()}
    assert not long, f"split or trim these files (limit {MAX_LINES} lines): {long}"


def test_the_size_rule_counts_lines(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("x = 1\n" * MAX_LINES)
    assert _over_the_limit([probe]) == {}
    probe.write_text("x = 1\n" * (MAX_LINES + 1))
    assert _over_the_limit([probe]) == {probe: MAX_LINES + 1}


def _prints(path: Path) -> list[int]:
    calls = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id == "print":
                calls.append(node.lineno)
            elif isinstance(f, ast.Attribute) and f.attr == "write" and isinstance(f.value, ast.Attribute):
                if isinstance(f.value.value, ast.Name) and f.value.value.id == "sys" and f.value.attr == "stdout":
                    calls.append(node.lineno)
    return calls


def test_only_the_cli_prints():
    """Library code returns values and logs; the command line decides what reaches the terminal."""
    offenders = {
        str(p.relative_to(ROOT)): lines
        for p in SOURCES
        if p.parent != PACKAGE / "cli" and p.name != "__main__.py" and (lines := _prints(p))
    }
    assert not offenders, offenders


def test_the_print_detector_finds_prints(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import sys\nprint('x')\nsys.stdout.write('y')\n")
    assert _prints(probe) == [2, 3]


def test_package_inits_hold_only_a_docstring():
    """An __init__ that imports makes `import trtverify.x.y` pay for its siblings (and hides cycles);
    the top package may also carry __version__."""
    for init in (p for p in SOURCES if p.name == "__init__.py"):
        body = _tree(init).body
        assert body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant), init
        rest = body[1:]
        if init.parent == PACKAGE:
            rest = [n for n in rest if not (isinstance(n, ast.Assign) and n.targets[0].id == "__version__")]
        assert not rest, f"{init.relative_to(ROOT)} holds more than its docstring"


def _private_imports(source: str, own: str | None) -> list[str]:
    """`from trtverify.<pkg>... import _name` where <pkg> is not `own`, the importer's package."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("trtverify."):
            pkg = node.module.split(".")[1]
            found += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_") and pkg != own]
    return found


def _package(path: Path) -> str | None:
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else None


def test_no_private_helper_crosses_a_package():
    offenders = {str(p.relative_to(ROOT)): f for p in SOURCES if (f := _private_imports(p.read_text(), _package(p)))}
    assert not offenders, offenders


def test_the_private_import_detector_detects():
    source = "from trtverify.compare.metrics import _hidden\nfrom trtverify.stages.base import _ok, run\n"
    assert _private_imports(source, _package(PACKAGE / "stages" / "e2e" / "stage.py")) == [
        "trtverify.compare.metrics._hidden"
    ]
    assert _private_imports(source, None) == ["trtverify.compare.metrics._hidden", "trtverify.stages.base._ok"]
