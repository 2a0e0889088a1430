"""Sweep of the ONNX package's own test models (models no one here wrote) through the commands a user runs.

For every model in `onnx/backend/test/data/{pytorch-converted,pytorch-operator,simple,light}` (the installed onnx
package's), in one process (TRTVERIFY_SUPERVISE=0, the CLI's main called directly):

    trtverify layerwise M M            # the model against itself
    trtverify convert M --precision fp16 -o M16
    trtverify layerwise M M16          # FP32 vs FP16, only where convert wrote M16

each without --inputs (generated inputs, what a user runs first), and prints the exit codes counted per folder and
command, then one line per model with a crash (exit 4) or a file left at -o by a failed convert. Exit 1 when any
command crashed (exit 4) or a failed convert left a file.

    PYTHONPATH=$PWD .venv/bin/python bench/onnx_test_models.py [--folder simple ...] [--json out.json] [-v]

tests/program/files/test_onnx_test_models.py runs the same sweep (tests/program/files/onnx_sweep.py) as a test.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.program.files.onnx_sweep import FOLDERS, models, sweep_model  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--folder", action="append", choices=FOLDERS, help="only these folders [default: all four]")
    ap.add_argument("--json", type=Path, help="write every model's exit codes and messages here")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per model")
    args = ap.parse_args()
    import tempfile

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for folder, path in models(args.folder or FOLDERS):
            row = sweep_model(folder, path, Path(tmp))
            rows.append(row)
            if args.verbose:
                print(row.line(), flush=True)
    counts: Counter = Counter()
    for r in rows:
        for cmd, res in r.results.items():
            counts[(r.folder, cmd, res.code)] += 1
    print(f"{len(rows)} models")
    for folder in args.folder or FOLDERS:
        n = sum(1 for r in rows if r.folder == folder)
        parts = []
        for cmd in ("self", "convert", "fp16"):
            codes = sorted({c for (f, k, c) in counts if f == folder and k == cmd})
            parts.append(f"{cmd}: " + ", ".join(f"exit {c} x{counts[(folder, cmd, c)]}" for c in codes))
        print(f"{folder} ({n}): " + "; ".join(parts))
    bad = [r for r in rows if r.crashed() or r.left_file]
    for r in bad:
        print("BAD " + r.line())
    if args.json:
        args.json.write_text(json.dumps([r.record() for r in rows], indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
