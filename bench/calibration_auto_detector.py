"""INT8 `auto` on a detector (issue 45, item 5): each calibration method alone and `auto`, timed, on torchvision's
SSDlite export (tests/data/torchvision/ssdlite.onnx), run as a user runs them (the CLI, in a subprocess).

The calibration set is 16 rows made from the export's two images (tests/data/torchvision/inputs.npz): row i is
image i % 2 plus Gaussian noise (sigma 0.1, seed 1), clipped to [0, 1]. For each of minmax, entropy, percentile
and auto: the wall time and the CPU time (user + sys) of `trtverify convert --precision int8 --method M`, the
longest stretch without a line on stdout or stderr (how long the user saw nothing), and for auto what it chose
and on what (read from stderr and from the written model's `trtverify.int8_calibration` metadata).

    python bench/calibration_auto_detector.py [--pythonpath DIR] [--methods minmax,entropy,percentile,auto]
        [--work DIR] [--out FILE.json]

`--pythonpath` runs another checkout's trtverify (a before/after comparison); the machine's load average is
recorded with each run, since the shared machine's wall times move with it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "torchvision"


def calibration_set(path: Path) -> Path:
    images = np.load(DATA / "inputs.npz", allow_pickle=False)["image"]
    rng = np.random.default_rng(1)
    rows = [np.clip(images[i % 2] + rng.normal(0, 0.1, images[0].shape), 0, 1).astype(np.float32) for i in range(16)]
    np.savez(path, image=np.stack(rows))
    return path


def run(method: str, calib: Path, work: Path, pythonpath: Path) -> dict:
    out = work / f"{method}.onnx"
    cmd = [sys.executable, "-m", "trtverify", "convert", str(DATA / "ssdlite.onnx"), "--precision", "int8",
           "--calibration", str(calib), "--method", method, "-o", str(out)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    where = [sys.executable, "-c", "import trtverify, pathlib; print(pathlib.Path(trtverify.__file__).parent)"]
    trtverify = subprocess.run(where, env=env, cwd=work, capture_output=True, text=True).stdout.strip()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    t0 = last = time.monotonic()
    silent, lines = 0.0, []
    # cwd: the work folder, so that `python -m` (the current folder first on sys.path) imports --pythonpath's package
    with subprocess.Popen(cmd, stderr=subprocess.STDOUT, stdout=subprocess.PIPE, text=True, env=env,
                          cwd=work) as proc:  # fmt: skip
        assert proc.stdout is not None
        for line in proc.stdout:
            now = time.monotonic()
            silent, last = max(silent, now - last), now
            lines.append(f"[{now - t0:6.1f}] {line.rstrip()}")
    wall = time.monotonic() - t0
    silent = max(silent, t0 + wall - last)  # the stretch from the last line to the end
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    record = None
    if proc.returncode == 0:
        import onnx

        props = {p.key: p.value for p in onnx.load(str(out), load_external_data=False).metadata_props}
        record = json.loads(props.get("trtverify.int8_calibration", "null"))
    return {"method": method, "trtverify": trtverify, "exit": proc.returncode, "wall_s": round(wall, 1),
            "cpu_s": round(cpu, 1), "longest_silence_s": round(silent, 1), "load_avg_1min": round(load, 1),
            "record": record, "stderr": lines}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pythonpath", type=Path, default=ROOT)
    ap.add_argument("--methods", default="minmax,entropy,percentile,auto")
    ap.add_argument("--work", type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="calib-auto-det-"))
    work.mkdir(parents=True, exist_ok=True)
    calib = calibration_set(work / "calib16.npz")
    results = []
    for method in args.methods.split(","):
        r = run(method, calib, work, args.pythonpath)
        results.append(r)
        print(f"{method} ({r['trtverify']}): exit {r['exit']}, wall {r['wall_s']} s, cpu {r['cpu_s']} s, longest "
              f"silence {r['longest_silence_s']} s, load {r['load_avg_1min']}, record {r['record']}",
              flush=True)  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps({"pythonpath": str(args.pythonpath), "results": results}, indent=1))


if __name__ == "__main__":
    main()
