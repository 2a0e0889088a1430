"""INT8 calibration methods measured on real models: `trtverify convert --precision int8 --method M`.

For each model, every method is run as a user runs it (the CLI, in a subprocess):

- ONNX Runtime (trtverify's own INT8): ``--method minmax``, ``entropy``, ``percentile`` and ``auto``
  (auto holds out the last quarter of the calibration rows, picks the method with the smallest worst
  output rel_l2 there, and recalibrates on all rows; the choice is read back from the written model's
  ``trtverify.int8_calibration`` metadata);
- ModelOpt (``--tool modelopt``): ``--method minmax`` (its ``max``) and ``entropy``, each bounded by
  ``--modelopt-timeout`` (default 300 s; passed to convert's own ``--timeout``, and the subprocess is
  killed 60 s later); a run that hits the bound is reported as ``timeout``, not as a number.

Each candidate is then judged by trtverify's own layerwise on evaluation rows that calibration did not
see (``trtverify layerwise REF CAND --inputs eval.npz``, INT8's default checks: rel_l2 <= 0.25 and
cosine >= 0.97 on every tensor): the worst tensor's rel_l2, the worst graph output's rel_l2, and whether
it passes. Where the demo has an e2e suite, its e2e stage runs the FP32 reference and every candidate
(``trtverify run SUITE --stage e2e``) and its headline metric and drop are reported.

Models and data (calibration rows / evaluation rows):

- ``fashion_mnist`` (demo/fashion_mnist/fashion_cnn_fp32.onnx) and ``fp16_repair``
  (demo/fp16_repair/fashion_bn_fp32.onnx, the same CNN with a post-ReLU BatchNorm whose variance is 1e8):
  the demo's training images are not in the repository, so calibration is rows 0-511 of
  data/test_subset.npz (x / 255; the demo's INT8 used 512 rows), layerwise runs on rows 1000-1063 and
  e2e (accuracy) on rows 512-1999;
- ``shapes`` (CenterNet detector) and ``shapes_seg`` (U-Net): the demos' own calibration data, regenerated
  (shapes_data with generator keys [20240612, 2, 0, j]; 256 and 128 images), layerwise on the first 32
  validation images, e2e (COCO mAP, mIoU) on the whole validation set (200 and 100 images);
- ``ocr_det`` and ``ocr_rec``: PP-OCRv4's text detector and recognizer (ch_PP-OCRv4_det_infer.onnx,
  ch_PP-OCRv4_rec_infer.onnx of the rapidocr_onnxruntime wheel; opset 12, dynamic shapes). The inputs are
  synthesised text images (bench/ocr_inputs.py: Pillow's default font on flat, gradient and noisy
  backgrounds), 64 calibration rows (seed 1) and 32 (det) / 64 (rec) evaluation rows (seed 2):
  det at a fixed 1x3x320x320 (PaddleOCR resizes to multiples of 32; 640 would quadruple every tensor on
  the 2-core machine), normalised (x/255 - mean)/std with ImageNet's mean and std; rec at 1x3x48x320,
  (x/255 - 0.5)/0.5, right-padded with 0. Neither has an e2e suite; the bench reports proxies against
  FP32 instead: det, the IoU of the binarised text map (probability > 0.3, PaddleOCR's DB threshold);
  rec, the fraction of lines whose CTC greedy decoding equals FP32's.
  The models come from ``--ocr-dir`` (a folder with the two .onnx files), or are downloaded with
  ``pip download rapidocr_onnxruntime==1.4.4 --no-deps`` into ``--cache`` and unzipped there.

Skipped demos: demo/modelopt holds candidates of fp16_repair's and fashion_mnist's models (no model of its
own); demo/plugins is the shapes detector (the same trained weights) around TensorRT plugin nodes, which
ONNX Runtime cannot run to calibrate; demo/shape_sweep is one random-weight 3x3 convolution and a softmax
made to show a baked batch size, with nothing trained to lose.

    python bench/calibration_methods.py [--models fashion_mnist,shapes,...] [--ocr-dir DIR | --cache DIR]
        [--modelopt-timeout 300] [--no-modelopt] [--work DIR] [--out bench/results] [--merge] [--reparse]

Results: bench/results/calibration_methods.{md,json}. Models run one after another; ``--merge`` keeps the other
models' rows of an existing JSON (to rerun one model), ``--reparse`` rebuilds the tables from the layerwise
results left in ``--work`` without rerunning anything.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from calibration_models import MODELS, Model, ocr_models  # noqa: E402

EXE = [sys.executable, "-m", "trtverify"]
ORT_METHODS = ["minmax", "entropy", "percentile", "auto"]
MODELOPT_METHODS = ["minmax", "entropy"]


def tail(text: str, n: int = 3) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return " | ".join(lines[-n:])


def convert(model: Model, work: Path, tool: str, method: str, timeout: int) -> dict:
    tag = f"{tool}_{method}"
    out = work / f"{model.name}_{tag}.onnx"
    cmd = [*EXE, "convert", str(model.reference), "--precision", "int8", "--calibration", str(work / "calib.npz")]
    cmd += ["--method", method, "-o", str(out)]
    if tool == "modelopt":
        cmd += ["--tool", "modelopt", "--timeout", str(timeout)]
    rec: dict = {"tool": tool, "method": method, "tag": tag, "command": " ".join(cmd[2:])}
    rec["load_1min"] = round(os.getloadavg()[0], 2)  # a shared machine: calibration times depend on it
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 60, cwd=ROOT)
    except subprocess.TimeoutExpired:
        rec.update(status="timeout", calib_s=round(time.perf_counter() - t0, 1), error=f"killed after {timeout + 60} s")
        return rec
    rec["calib_s"] = round(time.perf_counter() - t0, 1)
    (work / f"convert_{tag}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0 or not out.exists():
        timed_out = tool == "modelopt" and rec["calib_s"] >= timeout and proc.returncode == 2
        rec.update(status="timeout" if timed_out else "failed", exit=proc.returncode, error=tail(proc.stderr))
        return rec
    rec.update(status="ok", model=str(out))
    import onnx

    meta = {p.key: p.value for p in onnx.load(str(out), load_external_data=False).metadata_props}
    if "trtverify.int8_calibration" in meta:
        info = json.loads(meta["trtverify.int8_calibration"])
        rec["recorded"] = info
        rec["chosen"] = info.get("method")
    return rec


def layerwise(model: Model, work: Path, rec: dict, outputs: list[str]) -> None:
    out_dir = work / f"lw_{rec['tag']}"
    cmd = [*EXE, "layerwise", str(model.reference), rec["model"], "--inputs", str(work / "eval.npz")]
    cmd += ["--out", str(out_dir), "-q"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    rec["layerwise_s"] = round(time.perf_counter() - t0, 1)
    rec["layerwise_exit"] = proc.returncode
    results = out_dir / "results.json"
    if not results.exists():
        rec["layerwise_error"] = tail(proc.stdout + proc.stderr)
        return
    read_layerwise(rec, results, outputs)


def read_layerwise(rec: dict, results: Path, outputs: list[str]) -> None:
    """The figures of one candidate from its layerwise results.json."""
    cand = json.loads(results.read_text())["stages"][0]["candidates"][0]
    # a tensor the candidate's rewrite left without an equivalent (not_comparable) has no metrics: not compared
    rows = [r for r in cand["rows"] if r["metrics"].get("rel_l2") is not None]

    def rel(row: dict) -> float:
        v = row["metrics"]["rel_l2"]
        return float(v)  # results.json writes inf as the string "inf"

    worst = max(rows, key=rel)
    finite = [r for r in rows if np.isfinite(rel(r))]
    outs = [r for r in rows if r["tensor"] in outputs]
    rec.update(
        tensors=len(rows),
        not_compared=[r["tensor"] for r in cand["rows"] if r["metrics"].get("rel_l2") is None],
        failing_tensors=sum(not r["passed"] for r in rows),
        worst_rel_l2=rel(worst),
        worst_tensor=worst["tensor"],
        # rel_l2 is inf where the reference tensor is all zeros on a row (a dead ReLU) and the candidate is not
        nonfinite_tensors=[r["tensor"] for r in rows if not np.isfinite(rel(r))],
        worst_finite_rel_l2=max(map(rel, finite)) if finite else None,
        first_divergence=(cand.get("first_divergence") or {}).get("tensor"),
        root_cause=next(
            (
                f"{c['node']} ({c['op_type']}, local rel_l2 {c['local']['rel_l2']:.3g})"
                for c in cand.get("root_causes") or []
            ),
            None,
        ),
        output_rel_l2=max(map(rel, outs)) if outs else None,
        min_cosine=min(float(r["metrics"].get("cosine", 1.0)) for r in rows),
        nonfinite_outputs=[r["tensor"] for r in outs if not np.isfinite(rel(r))],
        int8_defaults_pass=bool(cand["passed"]),
        precision=cand.get("precision"),  # ModelOpt's INT8 computes the rest in FP16: int8+fp16
        checks=cand.get("checks_source"),
    )


def e2e(model: Model, work: Path, recs: list[dict]) -> dict | None:
    ok = [r for r in recs if r["status"] == "ok"]
    if model.e2e_suite is None or not ok:
        return None
    suite = model.e2e_suite(work, {r["tag"]: r["model"] for r in ok})
    path = work / "e2e_suite.yaml"
    import yaml

    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    proc = subprocess.run(
        [*EXE, "run", str(path), "--stage", "e2e", "--out", str(work / "e2e"), "-q"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    results = work / "e2e" / "results.json"
    if not results.exists():
        return {"error": tail(proc.stdout + proc.stderr)}
    stage = json.loads(results.read_text())["stages"][0]
    metric = model.e2e_metric
    ref = float(stage["reference"][metric])
    cands = {c["name"]: float(c["metrics"][metric]) for c in stage["candidates"]}
    for r in ok:
        if r["tag"] in cands:
            r["e2e"] = cands[r["tag"]]
            r["e2e_drop"] = ref - cands[r["tag"]]
    return {"metric": metric, "reference": ref, "samples": stage.get("samples"), "exit": proc.returncode}


def proxy(model: Model, work: Path, recs: list[dict]) -> dict | None:
    if model.proxy is None:
        return None
    ref_metric = None
    for r in recs:
        if r["status"] == "ok":
            r["e2e"], ref_metric = model.proxy(model.reference, Path(r["model"]), work)
            r["e2e_drop"] = 1.0 - r["e2e"]
    return {"metric": model.proxy_metric, "reference": None, "note": ref_metric}


def run_model(model: Model, work: Path, tools: list[tuple[str, str]], timeout: int) -> dict:
    import onnx

    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    calib, evaluation = model.data(work)
    np.savez(work / "calib.npz", **calib)
    np.savez(work / "eval.npz", **evaluation)
    outputs = [o.name for o in onnx.load(str(model.reference), load_external_data=False).graph.output]
    recs = []
    for tool, method in tools:
        print(f"[{model.name}] {tool} {method} ...", flush=True)
        rec = convert(model, work, tool, method, timeout)
        if rec["status"] == "ok":
            layerwise(model, work, rec, outputs)
        print(f"[{model.name}] {tool} {method}: {summary(rec)}", flush=True)
        recs.append(rec)
    e2e_info = e2e(model, work, recs) if model.e2e_suite else proxy(model, work, recs)
    return {
        "model": model.name,
        "reference": str(
            model.reference.relative_to(ROOT) if model.reference.is_relative_to(ROOT) else model.reference.name
        ),
        "description": model.description,
        "calibration_rows": int(next(iter(calib.values())).shape[0]),
        "evaluation_rows": int(next(iter(evaluation.values())).shape[0]),
        "input_shape": list(next(iter(evaluation.values())).shape[1:]),
        "e2e": e2e_info,
        "candidates": recs,
        "wall_s": round(time.perf_counter() - t0, 1),
    }


def summary(rec: dict) -> str:
    if rec["status"] != "ok":
        return f"{rec['status']} ({rec.get('error', '')})"
    s = f"{rec['calib_s']} s"
    if "worst_rel_l2" in rec:
        s += f", worst rel_l2 {rec['worst_rel_l2']:.4g}, output {rec['output_rel_l2']:.4g}"
        s += f", pass {rec['int8_defaults_pass']}"
    if rec.get("chosen") and rec["method"] == "auto":
        s += f", auto chose {rec['chosen']}"
    return s


def fetch_ocr(cache: Path) -> Path:
    folder = cache / "rapidocr_onnxruntime" / "models"
    if (folder / "ch_PP-OCRv4_det_infer.onnx").exists():
        return folder
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "rapidocr_onnxruntime==1.4.4", "--no-deps", "-d", str(cache)],
        check=True,
    )
    wheel = next(cache.glob("rapidocr_onnxruntime-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        z.extractall(cache, [n for n in z.namelist() if n.startswith("rapidocr_onnxruntime/models/")])
    return folder


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="fashion_mnist,fp16_repair,shapes,shapes_seg,ocr_det,ocr_rec")
    ap.add_argument(
        "--ocr-dir", type=Path, help="folder holding ch_PP-OCRv4_det_infer.onnx and ch_PP-OCRv4_rec_infer.onnx"
    )
    ap.add_argument(
        "--cache",
        type=Path,
        default=ROOT / "bench" / ".cache" / "rapidocr",
        help="where the wheel is downloaded without --ocr-dir",
    )
    ap.add_argument("--modelopt-timeout", type=int, default=300)
    ap.add_argument("--no-modelopt", action="store_true")
    ap.add_argument("--work", type=Path, default=ROOT / "bench" / ".cache" / "calibration_methods")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--merge", action="store_true", help="keep the other models' rows of an existing results JSON")
    ap.add_argument(
        "--reparse",
        action="store_true",
        help="rebuild the results from the layerwise results.json files in --work (nothing is rerun)",
    )
    args = ap.parse_args(argv)
    if args.reparse:
        return reparse(args.out / "calibration_methods.json", args.work)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    models = dict(MODELS)
    unknown = [n for n in names if n not in models and n not in ("ocr_det", "ocr_rec")]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join([*models, 'ocr_det', 'ocr_rec'])}")
    if any(n.startswith("ocr_") for n in names):
        if args.ocr_dir and not (args.ocr_dir / "ch_PP-OCRv4_det_infer.onnx").exists():
            ap.error(f"--ocr-dir {args.ocr_dir}: no ch_PP-OCRv4_det_infer.onnx there")
        models.update(ocr_models(args.ocr_dir or fetch_ocr(args.cache)))
    tools = [("ort", m) for m in ORT_METHODS]
    if not args.no_modelopt:
        tools += [("modelopt", m) for m in MODELOPT_METHODS]
    json_path = args.out / "calibration_methods.json"
    doc = json.loads(json_path.read_text()) if args.merge and json_path.exists() else {"models": []}
    for name in names:
        result = run_model(models[name], args.work / name, tools, args.modelopt_timeout)
        doc["models"] = [m for m in doc["models"] if m["model"] != name] + [result]
        doc.update(machine=machine(), modelopt_timeout_s=args.modelopt_timeout)
        args.out.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(finite_json(doc), indent=1) + "\n")
        (args.out / "calibration_methods.md").write_text(markdown(doc))
    return 0


def finite_json(value):
    """inf and nan as the strings "inf"/"nan" (JSON has no such numbers), as results.json writes them."""
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite_json(v) for v in value]
    if isinstance(value, float) and not np.isfinite(value):
        return str(value)
    return value


def reparse(json_path: Path, work: Path) -> int:
    import onnx

    doc = json.loads(json_path.read_text())
    for mod in doc["models"]:
        for rec in mod["candidates"]:
            results = work / mod["model"] / f"lw_{rec['tag']}" / "results.json"
            if rec["status"] == "ok" and results.exists():
                graph = onnx.load(rec["model"], load_external_data=False).graph
                read_layerwise(rec, results, [o.name for o in graph.output])
    doc["reparsed"] = time.strftime("%Y-%m-%d", time.gmtime())
    json_path.write_text(json.dumps(finite_json(doc), indent=1) + "\n")
    json_path.with_suffix(".md").write_text(markdown(doc))
    return 0


def machine() -> dict:
    import onnxruntime

    info = {
        "python": platform.python_version(),
        "onnxruntime": onnxruntime.__version__,
        "cpus": os.cpu_count(),
    }
    try:
        import modelopt

        info["modelopt"] = modelopt.__version__
    except ImportError:
        info["modelopt"] = None
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    info.update(commit=commit, date=time.strftime("%Y-%m-%d", time.gmtime()))
    return info


def fmt(v, digits: int = 3) -> str:
    if v is None:
        return "–"
    if isinstance(v, float) and not np.isfinite(v):
        return str(v)
    return f"{v:.{digits}g}" if isinstance(v, float) else str(v)


def markdown(doc: dict) -> str:
    m = doc.get("machine", {})
    lines = [
        "# INT8 calibration methods on real models",
        "",
        f"`bench/calibration_methods.py`, {m.get('date')}, commit `{m.get('commit')}`, "
        f"onnxruntime {m.get('onnxruntime')}, "
        f"ModelOpt {m.get('modelopt')}, {m.get('cpus')} CPUs. Layerwise: `trtverify layerwise` with INT8's defaults "
        "(rel_l2 <= 0.25, cosine >= 0.97 on every tensor) on evaluation rows calibration did not see. "
        f"ModelOpt bounded at {doc.get('modelopt_timeout_s')} s. e2e: the demo suite's e2e stage (Fashion-MNIST on "
        "test rows 512-1999, the others on their whole validation set); OCR: proxies against FP32 (text-map IoU at "
        "0.3; lines whose CTC decoding equals FP32's). The module's docstring gives the rows and why."
        + (
            f" Figures re-read from the run's layerwise results on {doc['reparsed']} (--reparse)."
            if "reparsed" in doc
            else ""
        ),
        "",
        "| model | tool | method | calibration s | worst tensor rel_l2 | output rel_l2 | layerwise INT8 defaults "
        "| e2e metric (FP32) | candidate | drop |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for mod in doc["models"]:
        e = mod.get("e2e") or {}
        for r in mod["candidates"]:
            method = r["method"] + (f" → {r['chosen']}" if r["method"] == "auto" and r.get("chosen") else "")
            if r["status"] != "ok":
                lines.append(
                    f"| {mod['model']} | {r['tool']} | {method} | {r['status']} after {r['calib_s']} s "
                    f"| {r.get('error', '')} | | | | | |"
                )
                continue
            verdict = (
                "pass"
                if r.get("int8_defaults_pass")
                else f"**fail** ({r.get('failing_tensors')}/{r.get('tensors')} tensors)"
            )
            if "worst_rel_l2" not in r:
                verdict = f"layerwise error: {r.get('layerwise_error')}"
            metric = e.get("metric") or "–"
            if e.get("reference") is not None and not e.get("note"):  # OCR proxies: FP32 against itself is 1
                metric += f" ({fmt(e['reference'], 4)})"
            worst = fmt(r.get("worst_rel_l2"))
            if r.get("nonfinite_tensors"):
                n_inf = len(r["nonfinite_tensors"])
                worst = f"{fmt(r.get('worst_finite_rel_l2'))} (+ inf on {n_inf}: all-zero in FP32 on a row)"
            lines.append(
                f"| {mod['model']} | {r['tool']} | {method} | {r['calib_s']} | {worst} | "
                f"{fmt(r.get('output_rel_l2'))} | {verdict} | {metric} | {fmt(r.get('e2e'), 4)} "
                f"| {fmt(r.get('e2e_drop'), 3)} |"
            )
    lines += ["", "## Models and data", ""]
    for mod in doc["models"]:
        lines.append(
            f"- **{mod['model']}** (`{mod['reference']}`): {mod['description']}; "
            f"{mod['calibration_rows']} calibration rows, "
            f"{mod['evaluation_rows']} evaluation rows of {mod['input_shape']}; whole run {mod['wall_s']} s."
        )
        loads = [r["load_1min"] for r in mod["candidates"] if "load_1min" in r]
        if loads:
            lines.append(f"  - 1-minute load average before each conversion: {min(loads)} to {max(loads)}")
        for r in mod["candidates"]:
            if r.get("method") == "auto" and r.get("recorded"):
                rec = r["recorded"]
                figures = ", ".join(f"{k} {fmt(v, 4)}" for k, v in (rec.get("figures") or {}).items())
                lines.append(f"  - auto's held-out figures (worst output rel_l2): {figures} → {rec.get('method')}")
            if r.get("worst_tensor") and not r.get("int8_defaults_pass", True):
                extra = f"; first divergence `{r['first_divergence']}`" if r.get("first_divergence") else ""
                extra += f"; root cause #1 {r['root_cause']}" if r.get("root_cause") else ""
                lines.append(f"  - {r['tool']} {r['method']}: worst tensor `{r['worst_tensor']}`{extra}")
        if (mod.get("e2e") or {}).get("note"):
            lines.append(f"  - {mod['e2e']['note']}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
