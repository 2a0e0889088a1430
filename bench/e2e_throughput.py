"""e2e stage wall time vs the raw inference time of its backends on the same data.

Raw inference: every batch is read and preprocessed first (not timed), then each model's
session is created (not timed: the stage leaves its session creation out of its loop time
too) and its
`infer` runs over the batches back to back, timed; once with ONNX Runtime's spin-waiting on
(its default) and once off (as the stage runs its first model). The mode with the lower median over the
repeats is the baseline. Stage: `trtverify`'s e2e stage as a suite runs it (reading,
preprocessing in background threads, inference, post-processing, metric updates); its
`wall_s` is the evaluation loop without creating and freeing sessions, before the final metrics.
Beside them, the CPU seconds of the work the stage does beyond inference, each measured
serially: reading and preprocessing all samples (once per stage), and post-processing plus
metric updates of one model's outputs (once per model).

Each repeat times raw-on, raw-off and the stage back to back (the stage first in every
other repeat), and the ratio is taken within the repeat, so that slow drifts of a shared
machine fall on both sides; the table gives the median ratio and its interquartile range.
Target from the issue: stage wall time within 10 % of raw inference.

    python bench/e2e_throughput.py [--suite suites/fashion_mnist.yaml ...] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from trtverify.backends.base import candidate_backend  # noqa: E402
from trtverify.backends.onnxruntime import OnnxRuntimeBackend  # noqa: E402
from trtverify.cli.run import run_and_record  # noqa: E402
from trtverify.config.loader import load_suite  # noqa: E402
from trtverify.stages.e2e.stage import open_task  # noqa: E402
from trtverify.tasks.batches import batches, make_preprocess  # noqa: E402


def preload(loaded) -> tuple:
    """(the task, every batch, CPU seconds of reading and preprocessing them), serially in this thread
    (opening the task and its dataset is not counted: the stage does it before its loop too)."""
    cfg = loaded.suite.stages.e2e
    task = open_task(loaded)
    reader = task.reader
    pre = make_preprocess(cfg.preprocess, loaded.search_path)
    t0 = time.process_time()
    data = list(batches(reader, range(len(reader)), cfg.batch_size, pre, 0))
    return task, data, time.process_time() - t0


def raw_inference(loaded, spinning: bool | None = None) -> float:
    """`spinning`: override the suite's ORT allow_spinning (None: as configured)."""
    suite = loaded.suite
    backends = suite.backends
    if spinning is not None:
        backends = backends.model_copy(
            update={"onnxruntime": backends.onnxruntime.model_copy(update={"allow_spinning": spinning})}
        )
    cfg = suite.stages.e2e
    data = [b.inputs for b in preload(loaded)[1]]
    names = suite.candidates_of(cfg)
    models = [OnnxRuntimeBackend(Path(suite.models.reference), backends.onnxruntime)]
    models += [
        candidate_backend(suite.models.candidates[n].backend, Path(suite.models.candidates[n].path), backends)
        for n in names
    ]
    total = 0.0
    for m in models:
        m.load()
        name = cfg.preprocess.input or m.inputs()[0].name
        m.prepare()  # session creation outside the timing, as in the stage
        t0 = time.perf_counter()
        for x in data:
            m.infer({name: x})
        total += time.perf_counter() - t0
        m.close()
    return total


def extra_cpu(loaded) -> tuple[float, float]:
    """CPU seconds of the work the stage does beyond inference, each done serially in this thread:
    reading and preprocessing every sample once, and post-processing plus metric updates of one
    model's outputs (the reference's; the stage does this once per model)."""
    suite = loaded.suite
    cfg = suite.stages.e2e
    task, data, read = preload(loaded)
    m = OnnxRuntimeBackend(Path(suite.models.reference), suite.backends.onnxruntime)
    m.load()
    name = cfg.preprocess.input or m.inputs()[0].name
    outputs = [m.infer({name: b.inputs}) for b in data]
    m.close()
    acc = task.accumulator()
    t0 = time.process_time()
    for out, b in zip(outputs, data):  # what the stage's post-processing thread does per batch
        task.update(acc, b.index, task.postprocess(out, b, "reference"), b.labels)
    return read, time.process_time() - t0


def median_ci(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """Distribution-free confidence interval of the median: the order statistics x(j), x(k) that the
    binomial(n, 1/2) law puts around the middle with at least `level` coverage (for n < 6 none
    exists at 95 %: the range is returned)."""
    xs, n = sorted(values), len(values)
    cdf = [sum(math.comb(n, i) for i in range(j + 1)) / 2**n for j in range(n)]  # P(Binomial(n, 1/2) <= j)
    j = max((j for j in range(n) if cdf[j] <= (1 - level) / 2), default=None)
    if j is None:
        return xs[0], xs[-1]
    return xs[j], xs[n - 1 - j]


def stage_wall(loaded, out: Path) -> tuple[float, dict]:
    timings = run_and_record(loaded, out, stages=["e2e"]).stages[0].timings
    return timings["wall_s"], timings


def _verdict(r: dict) -> str:
    if not r["meets_target"]:
        return "no"
    return "yes" if r["ratio_ci95"][1] <= 1.10 else "yes (median; not the whole CI)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", action="append", type=Path, help="suite(s) with an e2e stage [default: the two demos]")
    ap.add_argument(
        "--repeat",
        type=int,
        default=15,
        help="repeats; each gives one wall/raw ratio (single ratios vary by 10-25 %% on shared machines)",
    )
    ap.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    args = ap.parse_args()
    suites = args.suite or [
        p for p in (REPO / "suites" / "fashion_mnist.yaml", REPO / "suites" / "shapes_detection.yaml") if p.exists()
    ]
    rows = []
    for path in suites:
        loaded = load_suite(path)
        ons, offs, walls, stage_infer = [], [], [], []
        reading_cpu, post_cpu = zip(*(extra_cpu(loaded) for _ in range(3)))
        for i in range(args.repeat):

            def stage(loaded=loaded, walls=walls, stage_infer=stage_infer) -> None:
                wall, timings = stage_wall(loaded, REPO / "bench" / ".cache" / "e2e" / loaded.suite.name)
                walls.append(wall)
                stage_infer.append(timings["inference_s"])

            if i % 2:
                stage()
            ons.append(raw_inference(loaded, True))
            offs.append(raw_inference(loaded, False))
            if not i % 2:
                stage()
            print(
                f"{loaded.suite.name}: run {i + 1}: raw inference {ons[-1]:.3f} s (spinning) / {offs[-1]:.3f} s "
                f"(not), stage wall {walls[-1]:.3f} s",
                flush=True,
            )
        # the strict baseline: ORT spin-waiting on (its default) or off (what the stage uses), whichever is faster
        best = ons if statistics.median(ons) <= statistics.median(offs) else offs
        ratios = sorted(w / r for w, r in zip(walls, best))
        q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratios[0],) * 3
        raw, wall, ratio = statistics.median(best), statistics.median(walls), statistics.median(ratios)
        cfg = loaded.suite.stages.e2e
        rows.append(
            {
                "suite": loaded.suite.name,
                "task": cfg.task,
                "samples": len(open_task(loaded).reader),
                "models": 1 + len(loaded.suite.candidates_of(cfg)),
                "ort_intra_op_threads": loaded.suite.backends.onnxruntime.intra_op_num_threads,
                "raw_inference_s": raw,
                "raw_mode": "spinning" if best is ons else "not spinning",
                "raw_inference_spinning_s": statistics.median(ons),
                "raw_inference_not_spinning_s": statistics.median(offs),
                "stage_wall_s": wall,
                "stage_inference_s": statistics.median(stage_infer),
                "reading_cpu_s": statistics.median(reading_cpu),
                "post_cpu_s_per_model": statistics.median(post_cpu),
                "ratio": ratio,
                "ratio_iqr": [q1, q3],
                "ratio_ci95": list(median_ci(ratios)),
                "ratios": ratios,
                "meets_target": ratio <= 1.10,
            }
        )
    report = {
        "generated": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "repeat": args.repeat,
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "python": platform.python_version(),
            "usable_cores": len(os.sched_getaffinity(0)),
        },
        "rows": rows,
    }
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "e2e_throughput.json").write_text(json.dumps(report, indent=2) + "\n")
    md = [
        "| suite | task | samples | models | raw inference s (mode) | stage wall s | inference inside the "
        "stage s | extra CPU s: reading / post per model | wall / raw: median (95% CI of the median) | target ≤ 1.10 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    md += [
        f"| {r['suite']} | {r['task']} | {r['samples']} | {r['models']} | {r['raw_inference_s']:.3f} "
        f"({r['raw_mode']}) | {r['stage_wall_s']:.3f} | {r['stage_inference_s']:.3f} | "
        f"{r['reading_cpu_s']:.3f} / {r['post_cpu_s_per_model']:.3f} "
        f"| {r['ratio']:.3f} ({r['ratio_ci95'][0]:.3f}–{r['ratio_ci95'][1]:.3f}) "
        f"| {_verdict(r)} |"
        for r in rows
    ]
    threads = sorted({r["ort_intra_op_threads"] for r in rows})
    (args.results / "e2e_throughput.md").write_text(
        f"# e2e stage vs raw inference\n\nGenerated {report['generated']}, {args.repeat} repeats; "
        f"ratios taken within each repeat. {report['machine']['usable_cores']} usable cores, "
        f"ONNX Runtime intra-op threads {threads} (0: its default).\n\n" + "\n".join(md) + "\n"
    )
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
