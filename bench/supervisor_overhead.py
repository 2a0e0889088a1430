"""What native-crash containment costs (issue 36): the same commands with the work in a supervised child process
(the default on Linux) and in one process (TRTVERIFY_SUPERVISE=0), alternating, under bench/peakrss.py.

  python bench/supervisor_overhead.py [--repeat 5] [--cases cnn,encoder,demos]

cnn, encoder: `trtverify layerwise` on bench/.cache's models (bench/make_models.py), one sample as in
layerwise_vs_polygraphy.py; demos: `trtverify run` on the demo suites that need no torch. Each case runs
`--repeat` times in each mode, modes alternating; the table gives the median wall time and CPU time per mode
(timed here), the peak RSS of the process tree (one more run per mode under bench/peakrss.py), and their
ratios. Results: bench/results/supervisor_overhead.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "bench" / ".cache"
TRTVERIFY = str(Path(sys.executable).with_name("trtverify"))
DEMOS = ["fashion_mnist", "shapes_detection", "fp16_repair", "perf_demo"]


def _inputs(model: str, tmp: Path) -> Path:
    import numpy as np
    import onnx

    m = onnx.load(str(CACHE / f"{model}_fp32.onnx"), load_external_data=False)
    feed = {}
    for i in m.graph.input:
        dims = [d.dim_value or 1 for d in i.type.tensor_type.shape.dim]
        feed[i.name] = np.random.default_rng(0).standard_normal(dims).astype(np.float32)
    path = tmp / f"{model}_in.npz"
    np.savez(path, **feed)
    return path


def cases(names: list[str], tmp: Path) -> dict[str, list[str]]:
    out = {}
    for model in ("cnn", "encoder"):
        if model in names:
            if not (CACHE / f"{model}_fp32.onnx").is_file():
                sys.exit(f"{CACHE / model}_fp32.onnx missing: run bench/make_models.py first")
            out[f"layerwise {model}"] = [TRTVERIFY, "layerwise", str(CACHE / f"{model}_fp32.onnx"),
                                         str(CACHE / f"{model}_fp16.onnx"), "--inputs", str(_inputs(model, tmp)),
                                         "--out", str(tmp / model), "-q"]  # fmt: skip
    if "demos" in names:
        for suite in DEMOS:
            out[f"run {suite}"] = [TRTVERIFY, "run", str(ROOT / "suites" / f"{suite}.yaml"), "--out",
                                   str(tmp / suite), "-q"]  # fmt: skip
    return out


def measure(cmd: list[str], supervise: bool) -> dict:
    """Wall and CPU seconds of one run (timed here: peakrss.py polls every 100 ms, too coarse for 1 s runs)."""
    import resource
    import time

    env = dict(os.environ, TRTVERIFY_SUPERVISE="1" if supervise else "0")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode not in (0, 1):
        sys.exit(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu}


def peak(cmd: list[str], supervise: bool, tmp: Path) -> float:
    """Peak RSS of the process tree in MB (bench/peakrss.py: the largest process, or the tree's sampled sum)."""
    result = tmp / "peak.json"
    env = dict(os.environ, TRTVERIFY_SUPERVISE="1" if supervise else "0")
    subprocess.run([sys.executable, str(ROOT / "bench" / "peakrss.py"), str(result), "--", *cmd], env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    return json.loads(result.read_text())["peak_mb"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cases", default="cnn,encoder,demos")
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="trtverify-supervise-") as t:
        tmp = Path(t)
        for name, cmd in cases(args.cases.split(","), tmp).items():
            measure(cmd, True)  # warm the page cache and the compiled report template
            runs: dict[bool, list[dict]] = {False: [], True: []}
            for _ in range(args.repeat):
                for supervise in (False, True):
                    runs[supervise].append(measure(cmd, supervise))
            med = {s: {k: statistics.median(r[k] for r in runs[s]) for k in ("wall_s", "cpu_s")} for s in runs}
            for s in runs:
                med[s]["peak_rss_mb"] = peak(cmd, s, tmp)
            row = {
                "case": name,
                "one_process": med[False],
                "supervised": med[True],
                "wall_ratio": med[True]["wall_s"] / med[False]["wall_s"],
                "cpu_ratio": med[True]["cpu_s"] / med[False]["cpu_s"],
                "rss_ratio": med[True]["peak_rss_mb"] / med[False]["peak_rss_mb"],
                "walls": {str(s): [round(r["wall_s"], 3) for r in runs[s]] for s in runs},
            }
            rows.append(row)
            print(f"{name:28s} wall {med[False]['wall_s']:.3f} -> {med[True]['wall_s']:.3f} s "
                  f"({row['wall_ratio']:.3f}x), peak {med[False]['peak_rss_mb']:.0f} -> "
                  f"{med[True]['peak_rss_mb']:.0f} MB", flush=True)  # fmt: skip
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "supervisor_overhead.json").write_text(json.dumps({"repeat": args.repeat, "rows": rows}, indent=1))
    lines = [
        "# Native-crash containment: supervised worker against one process",
        "",
        f"`bench/supervisor_overhead.py --repeat {args.repeat}`: median of {args.repeat} alternating runs per mode.",
        "",
        "| case | one process: wall s / CPU s / peak MB | supervised: wall s / CPU s / peak MB | wall ratio | "
        "CPU ratio | peak ratio |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        a, b = r["one_process"], r["supervised"]
        lines.append(
            f"| {r['case']} | {a['wall_s']:.3f} / {a['cpu_s']:.2f} / {a['peak_rss_mb']:.0f} | {b['wall_s']:.3f} / "
            f"{b['cpu_s']:.2f} / {b['peak_rss_mb']:.0f} | {r['wall_ratio']:.3f} | {r['cpu_ratio']:.3f} | "
            f"{r['rss_ratio']:.3f} |"
        )
    (args.results / "supervisor_overhead.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
