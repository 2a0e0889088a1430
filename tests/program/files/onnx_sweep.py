"""The ONNX package's own test models through layerwise (self vs self), convert --precision fp16 and layerwise
(FP32 vs FP16), in this process: shared by bench/onnx_test_models.py and
tests/program/files/test_onnx_test_models.py."""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

FOLDERS = ("pytorch-converted", "pytorch-operator", "simple", "light")


def data_root() -> Path:
    import onnx

    return Path(onnx.__file__).parent / "backend" / "test" / "data"


def models(folders: Iterable[str] = FOLDERS) -> Iterator[tuple[str, Path]]:
    """(folder, model file) of every test model of the installed onnx package, sorted by name."""
    root = data_root()
    for folder in folders:
        d = root / folder
        if folder == "light":
            yield from ((folder, p) for p in sorted(d.glob("*.onnx")))
        else:
            yield from ((folder, p / "model.onnx") for p in sorted(d.iterdir()) if (p / "model.onnx").is_file())


@dataclass
class Result:
    code: int
    err: str

    def reason(self) -> str:
        lines = [x for x in self.err.strip().splitlines() if x.strip()]
        if self.code == 4:  # the exception line of the traceback
            return lines[-1][:200] if lines else ""
        said = [x for x in lines if "error" in x.lower()]  # a stage's `user error: ...`, the CLI's `error: ...`
        return ((said or lines or [""])[0]).strip()[:200]


@dataclass
class Row:
    folder: str
    path: Path
    ort_loads: bool
    results: dict[str, Result] = field(default_factory=dict)
    left_file: bool = False  # convert failed and left a file at -o

    @property
    def name(self) -> str:
        return self.path.parent.name if self.folder != "light" else self.path.stem

    def crashed(self) -> bool:
        return any(r.code == 4 for r in self.results.values())

    def line(self) -> str:
        codes = " ".join(f"{k}={r.code}" for k, r in self.results.items())
        worst = next((r for r in self.results.values() if r.code >= 2), None)
        why = f"  [{worst.reason()}]" if worst else ""
        left = " LEFT-FILE" if self.left_file else ""
        return f"{self.folder}/{self.name} ort={'y' if self.ort_loads else 'n'} {codes}{left}{why}"

    def record(self) -> dict:
        return {
            "folder": self.folder,
            "model": self.name,
            "ort_loads": self.ort_loads,
            "left_file": self.left_file,
            **{k: {"exit": r.code, "reason": r.reason()} for k, r in self.results.items()},
        }


def call(*argv: str) -> Result:
    """`trtverify ARGV` in this process (no worker process): its exit code and stderr."""
    from trtverify.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    old = os.environ.get("TRTVERIFY_SUPERVISE")
    os.environ["TRTVERIFY_SUPERVISE"] = "0"
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main(list(argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        if old is None:
            os.environ.pop("TRTVERIFY_SUPERVISE", None)
        else:
            os.environ["TRTVERIFY_SUPERVISE"] = old
    return Result(code, err.getvalue() + out.getvalue())


def ort_loads(path: Path) -> bool:
    import onnxruntime as ort

    try:
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - what is measured is whether it loads
        return False
    return True


def sweep_model(folder: str, path: Path, tmp: Path) -> Row:
    row = Row(folder, path, ort_loads(path))
    work = tmp / f"{folder}-{row.name}"
    work.mkdir(parents=True, exist_ok=True)
    out16 = work / "fp16.onnx"
    row.results["self"] = call("layerwise", str(path), str(path), "--out", str(work / "self"))
    row.results["convert"] = call("convert", str(path), "--precision", "fp16", "-o", str(out16))
    if row.results["convert"].code != 0:
        row.left_file = out16.exists()
    else:
        row.results["fp16"] = call("layerwise", str(path), str(out16), "--out", str(work / "fp16"))
    return row
