"""e2e stage wall time vs the raw inference time of its backends on the same data.

Raw inference: every batch is read and preprocessed first (not timed), then each model's
`infer` runs over the batches back to back, timed; once with ONNX Runtime's spin-waiting
on (its default) and once off (as the stage runs), and the faster of the two is the baseline. Stage: `trtverify`'s e2e stage as a
suite runs it (reading, preprocessing in background threads, inference, post-processing,
metrics). Target from the issue: stage wall time within 10 % of raw inference.

    python bench/e2e_throughput.py [--suite suites/fashion_mnist.yaml ...] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from trtverify.backends import candidate_backend  # noqa: E402
from trtverify.backends.onnxruntime import OnnxRuntimeBackend  # noqa: E402
from trtverify.config import load_suite  # noqa: E402
from trtverify.runner import run_suite  # noqa: E402
from trtverify.tasks.datasets import batches, make_preprocess, open_dataset  # noqa: E402


def raw_inference(loaded, spinning: bool | None = None) -> float:
    """`spinning`: override the suite's ORT allow_spinning (None: as configured)."""
    suite = loaded.suite
    backends = suite.backends
    if spinning is not None:
        backends = backends.model_copy(update={"onnxruntime": backends.onnxruntime.model_copy(update={"allow_spinning": spinning})})
    cfg = suite.stages.e2e
    reader = open_dataset(cfg.dataset)
    pre = make_preprocess(cfg.preprocess, loaded.search_path)
    data = [b.inputs for b in batches(reader, range(len(reader)), cfg.batch_size, pre, 0)]
    names = suite.candidates_of(cfg)
    models = [OnnxRuntimeBackend(Path(suite.models.reference), backends.onnxruntime)]
    models += [candidate_backend(suite.models.candidates[n].backend, Path(suite.models.candidates[n].path), backends) for n in names]
    total = 0.0
    for m in models:
        m.load()
        name = cfg.preprocess.input or m.inputs()[0].name
        m.infer({name: data[0]})  # session creation outside the timing, as in the stage
        t0 = time.perf_counter()
        for x in data:
            m.infer({name: x})
        total += time.perf_counter() - t0
        m.close()
    return total


def stage_wall(loaded, out: Path) -> tuple[float, dict]:
    result = run_suite(loaded, out, stages=["e2e"])
    timings = result.results["stages"][0]["timings"]
    return timings["wall_s"], timings


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", action="append", type=Path, help="suite(s) with an e2e stage [default: the two demos]")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    args = ap.parse_args()
    suites = args.suite or [p for p in (REPO / "suites" / "fashion_mnist.yaml", REPO / "suites" / "shapes_detection.yaml") if p.exists()]
    rows = []
    for path in suites:
        loaded = load_suite(path)
        raws, walls, spins, stage_infer = [], [], [], []
        for i in range(args.repeat):
            # the strict baseline: the faster of ORT spin-waiting on (the default) and off (what the stage uses)
            on, off = raw_inference(loaded, True), raw_inference(loaded, False)
            raws.append(min(on, off))
            spins.append(on)
            wall, timings = stage_wall(loaded, REPO / "bench" / ".cache" / "e2e" / loaded.suite.name)
            walls.append(wall)
            stage_infer.append(timings["inference_s"])
            print(f"{loaded.suite.name}: run {i + 1}: raw inference {on:.3f} s (spinning) / {off:.3f} s (not), stage wall {wall:.3f} s  {timings}", flush=True)
        raw, wall = statistics.median(raws), statistics.median(walls)
        cfg = loaded.suite.stages.e2e
        rows.append(
            {
                "suite": loaded.suite.name,
                "task": cfg.task,
                "samples": len(open_dataset(cfg.dataset)),
                "models": 1 + len(loaded.suite.candidates_of(cfg)),
                "raw_inference_s": raw,
                "raw_inference_spinning_s": statistics.median(spins),
                "stage_wall_s": wall,
                "stage_inference_s": statistics.median(stage_infer),
                "ratio": wall / raw,
                "meets_target": wall / raw <= 1.10,
            }
        )
    report = {
        "generated": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "repeat": args.repeat,
        "machine": {"cpu": platform.processor() or platform.machine(), "python": platform.python_version()},
        "rows": rows,
    }
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "e2e_throughput.json").write_text(json.dumps(report, indent=2) + "\n")
    md = [
        "| suite | task | samples | models | raw inference s (best) | stage wall s | inference inside the stage s | wall / raw | target ≤ 1.10 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    md += [
        f"| {r['suite']} | {r['task']} | {r['samples']} | {r['models']} | {r['raw_inference_s']:.3f} | {r['stage_wall_s']:.3f} | {r['stage_inference_s']:.3f} | {r['ratio']:.3f} | {'yes' if r['meets_target'] else 'no'} |"
        for r in rows
    ]
    (args.results / "e2e_throughput.md").write_text(f"# e2e stage vs raw inference\n\nGenerated {report['generated']}, median of {args.repeat}.\n\n" + "\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
