"""Peak memory of reading a marked-all Polygraphy capture of the 4.93 GB bench model (bench/make_big.py), and of
`trtverify layerwise BIG.onnx --captured outputs.json` on it, with one checkout's capture reader against another's
(before / after). Results: bench/results/captured_peakrss.{json,md}.

The capture is written with Polygraphy's own save function (`RunResults.save`, polygraphy/comparator/struct.py)
from ONNX Runtime's outputs of every node's output tensor (what `--onnx-outputs mark all` marks): `polygraphy run
big.onnx --onnxrt --onnx-outputs mark all` itself fails on this model (the marked model is a proto over 2 GiB,
bench/results/layerwise_vs_polygraphy_d4bba0b.md), so the marked model is written here with its weights left in
big.onnx.data. The capture's feed is the kit's (`trtverify capture`). `--tokens` sets the model's sequence length,
so the capture's size (the activations), while the weights stay 4.93 GB.

    python bench/captured_peakrss.py WORK_DIR [--tokens 512] [--checkout NAME=DIR ...] [--out bench/results]

WORK_DIR gets the model, the kit and the capture (about 5 + 2.5 + 2 GB at 512 tokens: never in the repository).
For each checkout (a folder holding its `trtverify` package: a checkout, or `git archive REV trtverify` unpacked),
run niced from that folder so that its package is the one imported: the layerwise run, its process tree's RSS
sampled every 100 ms (and its ru_maxrss), the peak after the reference pass apart; then `read_capture` and the
decoding of every tensor alone.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import make_big  # noqa: E402


def write_capture(model: Path, kit: Path, out: Path) -> dict:
    """Every node output of `model` for the kit's feed, run by ONNX Runtime, saved by Polygraphy's RunResults.save."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from polygraphy.comparator import IterationResult, RunResults

    m = onnx.load(str(model), load_external_data=False)
    typed = {vi.name: vi for vi in onnx.shape_inference.infer_shapes(m).graph.value_info}
    have = {o.name for o in m.graph.output}
    for node in m.graph.node:
        for name in node.output:
            if name and name not in have and node.op_type != "Constant":
                m.graph.output.append(typed[name])
                have.add(name)
    marked = model.with_name("big_marked.onnx")  # beside big.onnx.data, which its initializers name
    onnx.save(m, str(marked))
    with np.load(kit / "inputs.npz", allow_pickle=False) as z:
        feed = {k: z[k] for k in z.files}
    feed = {k.split("/", 1)[-1] if "/" in k else k: v for k, v in feed.items()}
    sess = ort.InferenceSession(str(marked), providers=["CPUExecutionProvider"])
    t0 = time.perf_counter()
    names = [o.name for o in sess.get_outputs()]
    arrays = dict(zip(names, sess.run(names, feed)))
    run_s = time.perf_counter() - t0
    del sess
    raw = sum(a.nbytes for a in arrays.values())
    results = RunResults()
    results.append(("onnxrt-runner-N0", [IterationResult(arrays, runtime=run_s, runner_name="onnxrt-runner-N0")]))
    del arrays
    out.parent.mkdir(parents=True, exist_ok=True)
    results.save(str(out))
    return {"tensors": len(names), "array_bytes": raw, "file_bytes": out.stat().st_size, "ort_run_s": run_s}


READER = """
import resource, sys, time
from pathlib import Path
from trtverify.toolout.captures import read_capture
t0 = time.perf_counter()
cap = read_capture(Path(sys.argv[1]))
t1 = time.perf_counter()
n = sum(get().nbytes for it in cap.iterations for get in it.values())
import trtverify
print(trtverify.__file__)
print(f"read {t1 - t0:.1f} s, decoded {n} bytes one tensor at a time in {time.perf_counter() - t1:.1f} s")
"""


def timed(cmd: list[str], env: dict, log_path: Path, cwd: Path) -> dict:
    """Run cmd niced; its process tree's RSS sampled every 100 ms and its own ru_maxrss (bench/peakrss.py's two
    measures), and the peak from the line announcing the captured candidate's comparison on (the phase that reads
    the capture) apart from the peak before it (the reference pass)."""
    from peakrss import tree_rss_bytes

    lines: list[tuple[float, str]] = []
    t0 = time.perf_counter()
    # cwd: `python -m` and `-c` put the working folder first on sys.path, before PYTHONPATH
    proc = subprocess.Popen(["nice", "-n", "5", *cmd], env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append((time.perf_counter() - t0, line))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    samples: list[tuple[float, int]] = []
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        samples.append((time.perf_counter() - t0, tree_rss_bytes(proc.pid)))
        time.sleep(0.1)
    wall = time.perf_counter() - t0
    reader.join(10)
    log_path.write_text("".join(f"[{t:7.1f} s] {line}" for t, line in lines))
    # the reference pass ends where the memory falls lowest between its line and the captured candidate's line (its
    # ONNX Runtime session closed); the capture is read after that, then compared
    ref = next((t for t, line in lines if "reference on" in line), None)
    compare = next((t for t, line in lines if "compare on" in line), None)
    split = None
    if ref is not None and compare is not None:
        split = min((r, t) for t, r in samples if ref <= t <= compare)[1]
    mb = 2**20

    def peak(lo: float, hi: float) -> float:
        return max((r for t, r in samples if lo <= t <= hi), default=0) / mb

    return {
        "cmd": cmd, "rc": os.waitstatus_to_exitcode(status), "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime, "ru_maxrss_mb": usage.ru_maxrss / 1024,
        "peak_mb": max(usage.ru_maxrss / 1024, peak(0, wall)),
        "reference_pass_ends_s": split,
        "peak_until_then_mb": peak(0, split) if split is not None else None,
        "peak_reading_and_comparing_capture_mb": peak(split, wall) if split is not None else None,
        "loadavg_1m_after": os.getloadavg()[0],
        "rss_mb_each_2s": [round(r / mb) for t, r in samples[::20]],
    }  # fmt: skip


def measure(name: str, code: Path, model: Path, capture: Path, work: Path) -> dict:
    env = dict(
        os.environ, PYTHONPATH=str(code), PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1"
    )  # lines as they come
    out = work / f"report_{name}"
    run = timed([sys.executable, "-m", "trtverify", "layerwise", str(model), "--captured", str(capture), "--out",
                 str(out)], env, work / f"log_{name}.txt", code)  # fmt: skip
    try:
        run["stage_status"] = json.loads((out / "results.json").read_text())["stages"][0].get("status")
    except (OSError, ValueError, KeyError, IndexError) as exc:
        run["stage_status"] = f"unread ({exc})"
    reader = timed([sys.executable, "-c", READER, str(capture)], env, work / f"log_reader_{name}.txt", code)
    reader["said"] = (work / f"log_reader_{name}.txt").read_text().strip()
    return {"name": name, "code": str(code), "layerwise": run, "reader_alone": reader}


def rev(code: Path) -> str:
    p = subprocess.run(["git", "-C", str(code), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return p.stdout.strip() or "?"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("work", type=Path)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--checkout", action="append", default=[], metavar="NAME=DIR",
                    help="a checkout whose trtverify is measured [default: after=this one]")  # fmt: skip
    ap.add_argument("--out", type=Path, default=HERE / "results")
    ap.add_argument("--write-capture", nargs=3, type=Path, metavar=("MODEL", "KIT", "OUT"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.write_capture:  # in a process of its own, so that its memory is given back before the measured runs
        print(json.dumps(write_capture(*a.write_capture)))
        return 0
    work = a.work.resolve()
    model_dir, kit = work / "m", work / "kit"
    capture = kit / "captured" / "outputs.json"
    model = model_dir / "big.onnx"
    if not model.exists():
        make_big.build_pair(model_dir, tokens=a.tokens)
    weights = (model_dir / "big.onnx.data").stat().st_size
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if not (kit / "manifest.json").exists():
        subprocess.check_call([sys.executable, "-m", "trtverify", "capture", str(model), "--out", str(kit)], env=env)
    made: dict = {}
    if not capture.exists():
        p = subprocess.run(["nice", "-n", "5", sys.executable, __file__, str(work), "--write-capture", str(model),
                            str(kit), str(capture)], capture_output=True, text=True, check=True)  # fmt: skip
        made = json.loads(p.stdout.strip().splitlines()[-1])
        (work / "capture.json").write_text(json.dumps(made))
    elif (work / "capture.json").exists():
        made = json.loads((work / "capture.json").read_text())
    checkouts = [c.split("=", 1) for c in a.checkout] or [["after", str(ROOT)]]
    runs = [measure(name, Path(code).resolve(), model, capture, work) for name, code in checkouts]
    for r in runs:
        r["rev"] = rev(Path(r["code"]))
    info = {"weights_bytes": weights, "capture_file_bytes": capture.stat().st_size, "capture": made,
            "tokens": a.tokens, "runs": runs, "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
            f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 1e9:.1f} GB"}  # fmt: skip
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "captured_peakrss.json").write_text(json.dumps(info, indent=1))
    print(json.dumps(info, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
