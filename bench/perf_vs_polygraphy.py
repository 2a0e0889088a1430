"""Inference latency: trtverify's `measure()` against Polygraphy's timing, on the same ONNX models, feeds and
ONNX Runtime session options (CPU).

Models: the committed demo models, FP32 / FP16 / INT8 QDQ each: Fashion-MNIST classification
(demo/fashion_mnist), shapes detection (demo/shapes), shapes segmentation (demo/shapes_seg). Feed (batch
--batch, default 1): Fashion-MNIST test images from demo/fashion_mnist/data/test_subset.npz, shapes validation
images from demo/shapes/val/images (both demos' images are 128x128 RGB), scaled to [0, 1] as the suites do; the
very same arrays go to both tools.

Session options, both tools alike (--configs):
  1thread  intra_op_num_threads=1, everything else ONNX Runtime's default
  default  ONNX Runtime's defaults (intra/inter-op threads 0 = its own choice)
trtverify times `OnnxRuntimeBackend.infer(feed)` (the backend the suites run, with those options) with
`trtverify.perf.measure.measure()` and its default Budget: 10 warm-up calls, then windows of 20 calls until the
CV of the last 3 window medians is <= 5 % (at least 60 calls), 10 s or 5000 calls. Polygraphy (0.53, PyPI) gets
an `onnxruntime.InferenceSession` built with the same SessionOptions, wrapped in `OnnxrtRunner`, and runs through
`Comparator.run(runners, data_loader=[feed] * N, warm_up=10)`: the loop of `polygraphy run --iterations N
--warm-up 10`, which times each `session.run` and prints their average. N = the number of calls trtverify timed
in the same round (the previous round's when Polygraphy goes first). Beside them, `measure()` around a bare
`session.run(None, feed)` on a third session with the same options ("measure(session.run)"): the same timing
rule without the backend's per-call feed check and cast, i.e. what Polygraphy's number covers.
Polygraphy's own SessionFromOnnx loader is not used for the sessions: it sets intra- and inter-op threads to the
CPU count, which is neither configuration.

Each model runs --repeat rounds; the order of the three measurements rotates from round to round. Reported per model
and configuration: the median over rounds of each tool's median ms; Polygraphy's average (what it prints); the
ratio trtverify / Polygraphy (median of the per-round ratios of the medians: agreement, ~1.0 expected); the
spread of each tool's figure across rounds (coefficient of variation); the wall time each tool spent in all
(trtverify: measure() with its warm-up; Polygraphy: Comparator.run with its warm-up and output copies).

Usage: python bench/perf_vs_polygraphy.py [--repeat 6] [--configs 1thread,default] [--batch 1] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from benchinfo import machine  # noqa: E402 (beside this script)

from trtverify.backends.onnxruntime import OnnxRuntimeBackend  # noqa: E402
from trtverify.config.backends import OnnxRuntimeOptions  # noqa: E402
from trtverify.perf.measure import Budget, measure  # noqa: E402

MODELS = {  # name: (ONNX file, input kind)
    "fashion_mnist fp32": ("demo/fashion_mnist/fashion_cnn_fp32.onnx", "fashion"),
    "fashion_mnist fp16": ("demo/fashion_mnist/fashion_cnn_fp16.onnx", "fashion"),
    "fashion_mnist int8": ("demo/fashion_mnist/fashion_cnn_int8_qdq.onnx", "fashion"),
    "shapes detection fp32": ("demo/shapes/shapes_fp32.onnx", "shapes"),
    "shapes detection fp16": ("demo/shapes/shapes_fp16.onnx", "shapes"),
    "shapes detection int8": ("demo/shapes/shapes_int8_qdq.onnx", "shapes"),
    "shapes segmentation fp32": ("demo/shapes_seg/seg_fp32.onnx", "shapes"),
    "shapes segmentation fp16": ("demo/shapes_seg/seg_fp16.onnx", "shapes"),
    "shapes segmentation int8": ("demo/shapes_seg/seg_int8_qdq.onnx", "shapes"),
}
CONFIGS = {"1thread": {"intra_op_num_threads": 1}, "default": {}}
BUDGET = Budget()


def feeds(batch: int) -> dict[str, np.ndarray]:
    """One input array per kind of model, the same for both tools."""
    fashion = np.load(REPO / "demo" / "fashion_mnist" / "data" / "test_subset.npz")["images"][:batch]
    from PIL import Image

    images = sorted((REPO / "demo" / "shapes" / "val" / "images").glob("*.png"))[:batch]
    shapes = np.stack([np.asarray(Image.open(p).convert("RGB")).transpose(2, 0, 1) for p in images])
    return {
        "fashion": np.ascontiguousarray(fashion.astype(np.float32) / 255.0),
        "shapes": np.ascontiguousarray(shapes.astype(np.float32) / 255.0),
    }


def session_options(ort, opts: OnnxRuntimeOptions):
    """ONNX Runtime SessionOptions with the fields of `opts` (the same ones the trtverify backend sets)."""
    assert opts.graph_optimization_level == "all", "only ORT_ENABLE_ALL is mirrored here"
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = opts.intra_op_num_threads
    so.inter_op_num_threads = opts.inter_op_num_threads
    so.log_severity_level = 3
    if not opts.allow_spinning:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return so


def run_trtverify(fn, batch: int) -> dict:
    t0 = time.perf_counter()
    stats = measure(fn, batch=batch, budget=BUDGET)
    wall = time.perf_counter() - t0
    return {"median_ms": stats.median_ms, "mean_ms": stats.mean_ms, "p99_ms": stats.p99_ms, "runs": stats.runs,
            "stopped_by": stats.stopped_by, "cv": stats.cv, "wall_s": wall}  # fmt: skip


def run_polygraphy(runner, feed: dict, n: int) -> dict:
    from polygraphy.comparator import Comparator

    t0 = time.perf_counter()
    results = Comparator.run([runner], data_loader=[feed] * n, warm_up=BUDGET.warmup)
    wall = time.perf_counter() - t0
    times = np.array([it.runtime for it in results[runner.name]], dtype=np.float64) * 1000.0
    return {"median_ms": float(np.median(times)), "mean_ms": float(times.mean()),
            "p99_ms": float(np.percentile(times, 99)), "runs": int(times.size), "wall_s": wall}  # fmt: skip


def _cv(xs: list[float]) -> float:
    return float(np.std(xs) / np.mean(xs)) if len(xs) > 1 and np.mean(xs) > 0 else 0.0


def bench(name: str, config: str, feed_all: dict, repeat: int, batch: int, log) -> dict:
    import onnxruntime as ort
    from polygraphy.backend.onnxrt import OnnxrtRunner

    path, kind = MODELS[name]
    model = REPO / path
    opts = OnnxRuntimeOptions(**CONFIGS[config])
    backend = OnnxRuntimeBackend(model, opts)
    backend.prepare()  # session creation is not timed, by either tool
    so = session_options(ort, opts)
    sess = ort.InferenceSession(str(model), sess_options=so, providers=list(opts.providers))
    raw_sess = ort.InferenceSession(str(model), sess_options=so, providers=list(opts.providers))
    runner = OnnxrtRunner(sess, name="onnxrt")
    input_name = backend.inputs()[0].name
    feed = {input_name: feed_all[kind]}
    tv, raw, pg, n = [], [], [], None
    run_polygraphy(runner, feed, 1)  # untimed: Polygraphy's lazy imports and first Comparator.run
    backend.infer(feed)
    tools = ["trtverify", "raw", "polygraphy"]
    for r in range(repeat):
        for tool in tools[r % 3 :] + tools[: r % 3]:  # the order rotates from round to round
            if tool == "trtverify":
                tv.append(run_trtverify(lambda: backend.infer(feed), batch))
                n = tv[-1]["runs"]
            elif tool == "raw":
                raw.append(run_trtverify(lambda: raw_sess.run(None, feed), batch))
            else:
                pg.append(run_polygraphy(runner, feed, n))
        log(f"[{config}] {name} round {r + 1}/{repeat}: trtverify {tv[-1]['median_ms']:.3f} ms "
            f"({tv[-1]['runs']} runs, {tv[-1]['stopped_by']}), polygraphy {pg[-1]['median_ms']:.3f} ms "
            f"(average {pg[-1]['mean_ms']:.3f})")  # fmt: skip
    backend.close()
    ratios = [t["median_ms"] / p["median_ms"] for t, p in zip(tv, pg)]
    raw_ratios = [t["median_ms"] / p["median_ms"] for t, p in zip(raw, pg)]
    return {
        "raw_median_ms": statistics.median(t["median_ms"] for t in raw),
        "raw_ratio": statistics.median(raw_ratios),
        "raw_spread": _cv([t["median_ms"] for t in raw]),
        "model": path,
        "config": config,
        "trtverify_median_ms": statistics.median(t["median_ms"] for t in tv),
        "polygraphy_median_ms": statistics.median(p["median_ms"] for p in pg),
        "polygraphy_average_ms": statistics.median(p["mean_ms"] for p in pg),
        "trtverify_average_ms": statistics.median(t["mean_ms"] for t in tv),
        "ratio": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "trtverify_spread": _cv([t["median_ms"] for t in tv]),
        "polygraphy_spread": _cv([p["median_ms"] for p in pg]),
        "polygraphy_average_spread": _cv([p["mean_ms"] for p in pg]),
        "runs": [t["runs"] for t in tv],
        "stopped_by": sorted({t["stopped_by"] for t in tv}),
        "trtverify_wall_s": sum(t["wall_s"] for t in tv),
        "polygraphy_wall_s": sum(p["wall_s"] for p in pg),
    }


def render(rows: list[dict]) -> tuple[str, str]:
    head = ["model", "ORT config", "trtverify median ms", "Polygraphy median ms", "ratio (range)",
            "average ms trtverify / Polygraphy", "measure(session.run) ms, ratio",
            "spread trtverify / Polygraphy median / average", "calls per round",
            "wall s trtverify / Polygraphy"]  # fmt: skip
    lines = []
    for r in rows:
        stop = "/".join(r["stopped_by"])
        lines.append([
            r["name"], r["config"], f"{r['trtverify_median_ms']:.3f}", f"{r['polygraphy_median_ms']:.3f}",
            f"**{r['ratio']:.3f}** ({r['ratio_min']:.2f}–{r['ratio_max']:.2f})",
            f"{r['trtverify_average_ms']:.3f} / {r['polygraphy_average_ms']:.3f}",
            f"{r['raw_median_ms']:.3f}, {r['raw_ratio']:.3f}",
            f"{r['trtverify_spread']:.1%} / {r['polygraphy_spread']:.1%} / {r['polygraphy_average_spread']:.1%}",
            f"{min(r['runs'])}–{max(r['runs'])} ({stop})",
            f"{r['trtverify_wall_s']:.2f} / {r['polygraphy_wall_s']:.2f}",
        ])  # fmt: skip
    widths = [max(len(h), *(len(x[i].replace("**", "")) for x in lines)) for i, h in enumerate(head)]
    text = "  ".join(h.ljust(w) for h, w in zip(head, widths)) + "\n"
    text += "\n".join("  ".join(c.replace("**", "").ljust(w) for c, w in zip(x, widths)) for x in lines)
    md = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    md += ["| " + " | ".join(x) + " |" for x in lines]
    return text, "\n".join(md)


def summary_lines(rows: list[dict]) -> list[str]:
    """Agreement and spread, per ORT configuration."""
    out = []
    for config in dict.fromkeys(r["config"] for r in rows):
        sel = [r for r in rows if r["config"] == config]
        ratios = [r["ratio"] for r in sel]
        raw = [r["raw_ratio"] for r in sel]
        tv_sp = [r["trtverify_spread"] for r in sel]
        pg_sp = [r["polygraphy_spread"] for r in sel]
        pa_sp = [r["polygraphy_average_spread"] for r in sel]
        out += [
            f"- **`{config}`, agreement:** trtverify / Polygraphy, ratio of the medians {min(ratios):.3f}–"
            f"{max(ratios):.3f} (median {statistics.median(ratios):.3f}) over {len(sel)} models; `measure()` around "
            f"the bare `session.run` / Polygraphy {min(raw):.3f}–{max(raw):.3f} (median {statistics.median(raw):.3f}).",
            f"- **`{config}`, spread across rounds** (coefficient of variation of the per-round figure; median over "
            f"models, worst in brackets): trtverify's median {statistics.median(tv_sp):.1%} ({max(tv_sp):.1%}); "
            f"Polygraphy's median of the same number of calls {statistics.median(pg_sp):.1%} ({max(pg_sp):.1%}); "
            f"the average Polygraphy prints {statistics.median(pa_sp):.1%} ({max(pa_sp):.1%}).",
        ]
    return out


def write_md(rows: list[dict], table: str, args, cmd: str, total_s: float, load: list[float]) -> None:
    wall_tv = sum(r["trtverify_wall_s"] for r in rows)
    wall_pg = sum(r["polygraphy_wall_s"] for r in rows)
    skew = [r for r in rows if r["polygraphy_average_ms"] > 1.2 * r["polygraphy_median_ms"]]
    tv_skew = [r for r in rows if r["trtverify_average_ms"] > 1.2 * r["trtverify_median_ms"]]
    lines = [
        "# Inference latency: trtverify `measure()` vs Polygraphy (ONNX Runtime, CPU)",
        "",
        f"Generated {_dt.date.today().isoformat()} by `{cmd}`: {args.repeat} rounds per model and configuration, "
        f"the order of the measurements rotating; batch {args.batch}; {total_s:.0f} s in all. Machine: "
        f"{machine(_versions())}. 1-minute load average {load[0]:.2f} before, {load[1]:.2f} after (2 cores shared "
        "with other work: single rounds can be disturbed, which is what the spread columns show).",
        "",
        table,
        "",
        "Summary:",
        "",
        *summary_lines(rows),
        f"- **Average vs median:** Polygraphy's average is more than 20 % above its median on {len(skew)} of "
        f"{len(rows)} pairs (trtverify's average, by as much: {len(tv_skew)} of {len(rows)}).",
        f"- **Wall time:** trtverify {wall_tv:.1f} s, Polygraphy {wall_pg:.1f} s in all. Polygraphy timed as many "
        "calls as trtverify's stability rule chose, with the same 10 warm-up calls; its `Comparator.run` also "
        "checks every feed and deep-copies every output.",
        "",
        "How to read it:",
        "",
        "- What each figure times: trtverify `measure()` times the whole `OnnxRuntimeBackend.infer(feed)` call "
        "(feed check and dtype cast, `session.run`, the output dict); Polygraphy times only its `session.run` call "
        "(`time.time()` around it); `measure(session.run)` is trtverify's rule around the bare `session.run`.",
        "- Same work: the same ONNX file, the same input array, sessions built with the same SessionOptions "
        "(intra/inter-op threads, graph optimisation `all`, spinning on), CPU provider, one session per "
        "measurement, created before timing.",
        "- Spread: each round's figure is one tool's median (or average) over the calls of that round; the spread "
        "is the standard deviation / mean of those figures across rounds. The stability rule decides how many calls "
        "a round times; with that same number, Polygraphy's median is a like-for-like estimator, so the spread "
        "columns compare the two timing loops, and the average column shows what `polygraphy run` would report.",
        "- `calls per round`: how many calls trtverify's stability rule timed (after 10 warm-up calls) and why it "
        "stopped (`stable`: CV of the last 3 window medians <= 5 % with at least 60 calls; `budget`: 10 s).",
        "- `default` on a 2-core machine: ONNX Runtime's intra-op pool takes both cores, so the caller's Python "
        "thread, and anything else running, competes with it. A large `default` spread with a small `1thread` one "
        "on the same model says the configuration, not the timing rule, is unstable here.",
        "- Not measured: TensorRT (no GPU here); Polygraphy's own session loader (SessionFromOnnx sets intra- and "
        "inter-op threads to the CPU count, a third configuration).",
        "",
    ]
    args.out.write_text("\n".join(lines))


def _versions() -> str:
    import onnxruntime as ort
    import polygraphy

    return f"onnxruntime {ort.__version__}, polygraphy {polygraphy.__version__}, numpy {np.__version__}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    ap.add_argument("--repeat", type=int, default=6, help="rounds per model and configuration [6]")
    ap.add_argument("--configs", default="1thread,default", help="ORT session options: 1thread, default [both]")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated model names [all nine]")
    ap.add_argument("--batch", type=int, default=1, help="samples per inference [1]")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "perf_vs_polygraphy.md", help="markdown results")
    args = ap.parse_args(argv)
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    if args.repeat < 1 or args.batch < 1:
        ap.error("--repeat and --batch must be positive")
    if not configs or set(configs) - set(CONFIGS):
        ap.error(f"--configs: choose from {list(CONFIGS)}")
    if not names or set(names) - set(MODELS):
        ap.error(f"--models: choose from {list(MODELS)}")
    from polygraphy.logger import G_LOGGER

    G_LOGGER.module_severity = G_LOGGER.ERROR  # no per-run log lines on stdout

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    cmd = "python bench/perf_vs_polygraphy.py" + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    load = [os.getloadavg()[0]]
    t0 = time.perf_counter()
    feed_all = feeds(args.batch)
    rows = []
    for config in configs:
        for name in names:
            rows.append({"name": name, **bench(name, config, feed_all, args.repeat, args.batch, log)})
    total = time.perf_counter() - t0
    load.append(os.getloadavg()[0])
    text, md = render(rows)
    print(text)
    print(f"\ntotal {total:.0f} s")
    write_md(rows, md, args, cmd, total, load)
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
