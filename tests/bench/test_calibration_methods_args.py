"""bench/calibration_methods.py's argument handling (the bench itself takes minutes: not run here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "calibration_methods.py"


def run(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(BENCH), "--work", str(tmp_path / "work"), "--out", str(tmp_path / "out"), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_unknown_model_is_a_usage_error_naming_the_known_ones(tmp_path: Path) -> None:
    proc = run("--models", "fashion_mnist,resnet", tmp_path=tmp_path)
    assert proc.returncode == 2
    assert "unknown model(s) resnet" in proc.stderr
    assert "shapes_seg" in proc.stderr and "ocr_rec" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_ocr_dir_without_the_models_is_a_usage_error(tmp_path: Path) -> None:
    proc = run("--models", "ocr_det", "--ocr-dir", str(tmp_path), tmp_path=tmp_path)
    assert proc.returncode == 2
    assert "no ch_PP-OCRv4_det_infer.onnx there" in proc.stderr
    assert not (tmp_path / "work").exists()
