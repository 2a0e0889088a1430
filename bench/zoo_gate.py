"""The release gate over the demo suites (issue 40): one machine one suite at a time (`-j 1`), one machine two at a
time (`-j 2`), and four shards merged, each command under bench/peakrss.py (wall time, peak RSS of its whole
process tree, CPU seconds).

  python bench/zoo_gate.py [--repeat 1] [--suites fashion_mnist,...]

The suites are the ones `make demo` runs (the Makefile's list). The four shards run one after another here (this
machine has one set of cores); on four machines the gate would take the slowest shard plus the merge, which is
what "slowest shard + merge" reports. The merged results are compared with the one-machine run's
(bench/same_results.py, timings and output paths apart; the perf stage's and repair's measured latencies differ
from run to run by nature and are left out of that comparison). Results: bench/results/zoo_gate.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRTVERIFY = str(Path(sys.executable).with_name("trtverify"))
sys.path.insert(0, str(ROOT / "bench"))
from same_results import differences  # noqa: E402

# timings, paths into the output folder, and latencies measured (repair's cost), which differ from run to run
SKIP = {"started", "duration_s", "timings", "overhead_vs_inference", "merged", "model", "dirs", "latency_ms"}
SKIP |= {"exports", "repair_json", "repaired_model"}


def demo_suites() -> list[str]:
    return re.findall(r"trtverify run suites/(\w+)\.yaml", (ROOT / "Makefile").read_text())


def measured(cmd: list[str], tmp: Path, tag: str) -> dict:
    out = tmp / f"{tag}.json"
    p = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "peakrss.py"), str(out), "--", *cmd],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    result = json.loads(out.read_text())
    result["exit"] = p.returncode
    return result


def _strip(x: object) -> object:
    if isinstance(x, dict):
        if x.get("name") == "perf":
            return {"name": "perf", "status": x.get("status")}
        return {k: _strip(v) for k, v in x.items() if k not in SKIP}
    if isinstance(x, list):
        return [_strip(v) for v in x]
    return x


def _timed(run: dict) -> str:
    return f"{run['wall_s']:.1f} s (load {run['loadavg_1m'][0]:.1f})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--suites", default=",".join(demo_suites()))
    args = ap.parse_args()
    names = args.suites.split(",")
    tmp = Path(tempfile.mkdtemp(prefix="zoo_gate_"))
    folder = ROOT / "suites"
    files = [str(folder / f"{n}.yaml") for n in names]
    runs: dict[str, list[dict]] = {"j1": [], "j2": [], "shards": [], "merge": []}
    for r in range(args.repeat):
        for mode in ("j1", "j2"):
            out = tmp / f"{mode}-{r}"
            runs[mode].append(
                measured([TRTVERIFY, "run", *files, "-j", mode[1], "--out", str(out), "-q"], tmp, f"{mode}-{r}")
            )
        shard_runs = []
        for i in (1, 2, 3, 4):
            out = tmp / f"s{i}-{r}"
            shard_runs.append(
                measured([TRTVERIFY, "run", *files, "--shard", f"{i}/4", "--out", str(out), "-q"], tmp, f"s{i}-{r}")
            )
        runs["shards"].append({"shards": shard_runs})
        dirs = [str(tmp / f"s{i}-{r}") for i in (1, 2, 3, 4)]
        runs["merge"].append(measured([TRTVERIFY, "merge", *dirs, "--out", str(tmp / f"m-{r}"), "-q"], tmp, f"m-{r}"))
    same = {}
    for n in names:
        a = json.loads((tmp / "j1-0" / n / "results.json").read_text())
        b = json.loads((tmp / "m-0" / n / "results.json").read_text())
        same[n] = differences(_strip(a), _strip(b))[:5]

    def med(xs: list[float]) -> float:
        xs = sorted(xs)
        return xs[len(xs) // 2]

    shard_wall = [max(s["wall_s"] for s in x["shards"]) for x in runs["shards"]]
    summary = {
        "suites": names,
        "cores": len(os.sched_getaffinity(0)),
        "j1": {"wall_s": med([x["wall_s"] for x in runs["j1"]]), "peak_mb": max(x["peak_mb"] for x in runs["j1"])},
        "j2": {"wall_s": med([x["wall_s"] for x in runs["j2"]]), "peak_mb": max(x["peak_mb"] for x in runs["j2"])},
        "shards": {
            "each_wall_s": [s["wall_s"] for s in runs["shards"][0]["shards"]],
            "each_peak_mb": [s["peak_mb"] for s in runs["shards"][0]["shards"]],
            "slowest_wall_s": med(shard_wall),
            "merge_wall_s": med([x["wall_s"] for x in runs["merge"]]),
            "merge_peak_mb": max(x["peak_mb"] for x in runs["merge"]),
        },
        "exit": {k: [x.get("exit") for x in v] for k, v in runs.items() if k != "shards"},
        "merged_equals_one_machine": {n: not d for n, d in same.items()},
        "differences": {n: d for n, d in same.items() if d},
        "runs": runs,
    }
    results = ROOT / "bench" / "results"
    (results / "zoo_gate.json").write_text(json.dumps(summary, indent=2) + "\n")
    sh = summary["shards"]
    lines = [
        "# The gate over the demo suites: one machine, -j 2, four shards merged",
        "",
        f"`python bench/zoo_gate.py`: the {len(names)} suites `make demo` runs ({', '.join(names)}), on a machine of "
        f"{summary['cores']} cores shared with other work; {args.repeat} run(s) of each, median wall time"
        " (of two runs: the slower). Peak memory: the peak resident memory of the command's whole process tree"
        " (bench/peakrss.py).",
        "",
        "| run | wall time | peak memory |",
        "|---|---|---|",
        f"| one machine, `-j 1` | {summary['j1']['wall_s']:.1f} s | {summary['j1']['peak_mb']:.0f} MB |",
        f"| one machine, `-j 2` | {summary['j2']['wall_s']:.1f} s | {summary['j2']['peak_mb']:.0f} MB |",
        f"| 4 shards: slowest shard + merge (4 machines) | {sh['slowest_wall_s']:.1f} + {sh['merge_wall_s']:.1f} s | "
        f"{max(sh['each_peak_mb']):.0f} MB per shard, {sh['merge_peak_mb']:.0f} MB merge |",
        f"| 4 shards one after another here (sum) | {sum(sh['each_wall_s']):.1f} s | |",
        "",
        "Every run (wall time, 1-minute load average before it; 2 cores): "
        + "; ".join(f"{k} {', '.join(_timed(x) for x in runs[k])}" for k in ("j1", "j2", "merge"))
        + "; shards "
        + "; ".join(", ".join(_timed(s) for s in x["shards"]) for x in runs["shards"])
        + ".",
        "",
        f"Shards' wall times (first run): {', '.join(f'{w:.1f} s' for w in sh['each_wall_s'])}; peak memory: "
        f"{', '.join(f'{m:.0f} MB' for m in sh['each_peak_mb'])}.",
        "",
        "Merged results equal to the one-machine run's (timings, output paths and measured latencies apart): "
        + ", ".join(f"{n} {'yes' if ok else 'NO'}" for n, ok in summary["merged_equals_one_machine"].items())
        + ".",
        "",
    ]
    (results / "zoo_gate.md").write_text("\n".join(lines))
    print("\n".join(lines))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
