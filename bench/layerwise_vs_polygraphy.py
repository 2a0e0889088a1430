"""Layer-wise FP32-vs-FP16 comparison: trtverify vs Polygraphy 0.53, CPU, ONNX Runtime.

For each model (built by bench/make_models.py into bench/.cache/):

  Polygraphy (two fresh processes; wall times summed, peak = max of the two):
    polygraphy run REF.onnx  --onnxrt --onnx-outputs mark all --save-inputs in.json --save-outputs ref.json
    polygraphy run CAND.onnx --onnxrt --onnx-outputs mark all --load-inputs in.json --load-outputs ref.json
  trtverify (one fresh process, root-cause analysis included):
    trtverify layerwise REF.onnx CAND.onnx --inputs in.npz --out DIR
  where in.npz holds exactly the input values Polygraphy generated (from its in.json).

Every command runs under bench/peakrss.py: wall time and peak RSS of its process tree.
Tensors compared: Polygraphy's 'Comparing Output' lines of the second command (and the outputs
saved in ref.json); trtverify's len(results.json stages[0].rows).
Results: a table on stdout, bench/results/layerwise_vs_polygraphy.{json,md}.

Model `big` (bench/make_big.py): a 12-block MLP whose FP32 weights are 4.93 GB of external data, and its FP16
twin (2.47 GB), made in a temporary folder (--big-dir) and removed afterwards. Polygraphy's candidate pass
cannot serialize a proto over 2 GiB; trtverify is measured against its FP32 reference pass alone.
Every row also states its peak RSS as a multiple of the reference's FP32 weight bytes.

Usage: python bench/layerwise_vs_polygraphy.py [--models cnn,encoder,big] [--repeat 3] [--threads N]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CACHE = HERE / ".cache"
RESULTS = HERE / "results"
BIN = Path(sys.executable).parent
# issue 28's targets on the cnn and encoder models (the first ones, from issue 9, were 1/3 and 1/2)
TIME_TARGET = 0.15
MEM_TARGET = 0.40
NOT_AVAILABLE = "trtverify layerwise not available"

sys.path.insert(0, str(HERE))
import make_big  # noqa: E402
import make_models  # noqa: E402

BIG = "big"


def weight_bytes(path: Path) -> int:
    """Bytes of the model's initializers, in the file or in external data (read without the weights)."""
    import onnx

    m = onnx.load(str(path), load_external_data=False)
    total = 0
    for t in m.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            total += int(next((e.value for e in t.external_data if e.key == "length"), 0))
        else:
            total += len(t.raw_data) or t.ByteSize()
    return total


ANSI = re.compile(r"\x1b\[[0-9;]*m")
COMPARING = re.compile(
    r"Comparing Output: '(?P<name>.*?)' \(dtype=(?P<cand>\w+), shape=\(.*?\)\) with '.*?' \(dtype=(?P<ref>\w+),"
)


# --------------------------------------------------------------------------------------------
# measuring
# --------------------------------------------------------------------------------------------


def _tool(name: str) -> list[str]:
    """Console script from this interpreter's environment (same venv), else PATH."""
    exe = BIN / name
    if exe.exists():
        return [str(exe)]
    found = shutil.which(name)
    return [found] if found else []


def _env(threads: int | None) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    if threads:
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
            env[var] = str(threads)
    return env


def measure(cmd: list[str], log_stem: Path, threads: int | None, cwd: Path) -> dict:
    """Run cmd fresh under peakrss.py (pinned to `threads` CPUs with taskset if given)."""
    if threads:
        cmd = ["taskset", "-c", f"0-{threads - 1}", *cmd]
    result_json = log_stem.with_suffix(".measure.json")
    result_json.unlink(missing_ok=True)
    with open(log_stem.with_suffix(".stdout.log"), "wb") as out, open(log_stem.with_suffix(".stderr.log"), "wb") as err:
        rc = subprocess.call(
            [sys.executable, str(HERE / "peakrss.py"), str(result_json), "--", *cmd],
            stdout=out,
            stderr=err,
            cwd=cwd,
            env=_env(threads),
        )
    if not result_json.exists():
        raise RuntimeError(f"peakrss.py failed (rc {rc}) for {cmd}; see {log_stem}.stderr.log")
    result = json.loads(result_json.read_text())
    # repo-relative paths in the recorded command, so the committed results do not depend on the checkout's location
    result["cmd"] = [c.replace(str(REPO) + os.sep, "") for c in result["cmd"]]
    return result


def _tail(path: Path, n: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def _warm_page_cache(*paths: Path) -> None:
    """Read the model files once, untimed, so neither tool pays for a cold disk read."""
    for p in paths:
        with open(p, "rb") as f:
            while f.read(1 << 24):
                pass


# --------------------------------------------------------------------------------------------
# the two tools
# --------------------------------------------------------------------------------------------


def run_polygraphy(ref: Path, cand: Path, work: Path, threads: int | None, outputs: list[str] | None = None) -> dict:
    """The issue's two commands; with `outputs`, the same commands marking exactly those tensors."""
    poly = _tool("polygraphy") or [sys.executable, "-m", "polygraphy"]
    work.mkdir(parents=True, exist_ok=True)
    for f in ("in.json", "ref.json"):
        (work / f).unlink(missing_ok=True)
    marks = ["--onnx-outputs", *outputs] if outputs else ["--onnx-outputs", "mark", "all"]
    cmd1 = [*poly, "run", str(ref), "--onnxrt", *marks, "--save-inputs", "in.json", "--save-outputs", "ref.json"]
    cmd2 = [*poly, "run", str(cand), "--onnxrt", *marks, "--load-inputs", "in.json", "--load-outputs", "ref.json"]
    m1 = measure(cmd1, work / "1_ref", threads, work)
    if m1["rc"] != 0 or not (work / "ref.json").exists():
        return {
            "error": f"polygraphy reference run failed (rc {m1['rc']}):\n{_tail(work / '1_ref.stdout.log')}\n"
            f"{_tail(work / '1_ref.stderr.log')}",
            "steps": [m1],
        }
    m2 = measure(cmd2, work / "2_cand", threads, work)
    log = (work / "2_cand.stdout.log").read_text(errors="replace") + (work / "2_cand.stderr.log").read_text(
        errors="replace"
    )
    log = ANSI.sub("", log)  # in case `colored` decides to colour a non-terminal
    compared = [(m["name"], m["cand"], m["ref"]) for m in COMPARING.finditer(log)]
    row = {
        "wall_s": m1["wall_s"] + m2["wall_s"],
        "cpu_s": m1["cpu_s"] + m2["cpu_s"],
        "peak_mb": max(m1["peak_mb"], m2["peak_mb"]),
        "steps": [m1, m2],
        "tensors_compared": len(compared),
        "compared": compared,
        # rc 1 with comparisons printed = FP16 outside Polygraphy's default tolerance (abs=rel=1e-5): expected
        "verdict": "passed" if m2["rc"] == 0 else ("failed" if compared else "error"),
    }
    if not compared:
        row["error"] = (
            f"polygraphy candidate run compared nothing (rc {m2['rc']}):\n{_tail(work / '2_cand.stdout.log')}\n"
            f"{_tail(work / '2_cand.stderr.log')}"
        )
    return row


def run_polygraphy_reference(ref: Path, work: Path, threads: int | None) -> dict:
    """Polygraphy's FP32 reference pass marking nothing (graph outputs only): where `mark all` cannot serialize
    the marked model (over 2 GiB), the least a Polygraphy comparison costs; it also saves the inputs."""
    poly = _tool("polygraphy") or [sys.executable, "-m", "polygraphy"]
    work.mkdir(parents=True, exist_ok=True)
    for f in ("in.json", "ref.json"):
        (work / f).unlink(missing_ok=True)
    cmd = [*poly, "run", str(ref), "--onnxrt", "--save-inputs", "in.json", "--save-outputs", "ref.json"]
    m = measure(cmd, work / "1_ref_outputs_only", threads, work)
    row = {"wall_s": m["wall_s"], "cpu_s": m["cpu_s"], "peak_mb": m["peak_mb"], "steps": [m]}
    if m["rc"] != 0:
        row["error"] = f"polygraphy reference pass (outputs only) failed (rc {m['rc']})"
    return row


def polygraphy_saved(work: Path) -> dict:
    """What Polygraphy saved: the input feed (one sample) and the names/dtypes of ref.json's outputs."""
    from polygraphy.json import load_json

    feeds = load_json(str(work / "in.json"))
    results = load_json(str(work / "ref.json"))
    _runner, iterations = results[0]
    outputs = iterations[0]
    return {"inputs": feeds[0], "ref_outputs": {k: str(v.dtype) for k, v in outputs.items()}}


def write_npz(inputs: dict, path: Path) -> dict:
    import numpy as np

    tmp = path.with_name(path.stem + ".tmp.npz")
    np.savez(tmp, **{k: np.asarray(v) for k, v in inputs.items()})
    tmp.replace(path)
    return {k: {"shape": list(np.shape(v)), "dtype": str(np.asarray(v).dtype)} for k, v in inputs.items()}


_AVAILABLE: dict[str, bool] = {}
TRTVERIFY: list[str] = []  # set by --trtverify; default: the console script beside this interpreter


def _trtverify_cmd() -> list[str]:
    return TRTVERIFY or _tool("trtverify")


def trtverify_available() -> bool:
    if "v" not in _AVAILABLE:
        tv = _trtverify_cmd()
        ok = False
        if tv:
            p = subprocess.run([*tv, "layerwise", "--help"], capture_output=True, text=True)
            ok = p.returncode == 0
        _AVAILABLE["v"] = ok
    return _AVAILABLE["v"]


def bytecompile_trtverify() -> str:
    """Byte-compile the measured trtverify's package, as `pip install` does for Polygraphy's: an editable install
    run with PYTHONDONTWRITEBYTECODE set would otherwise compile every module from source on every run, which
    no installed tool does. Returns what was done, for the report."""
    tv = _trtverify_cmd()
    if not tv:
        return "trtverify not found"
    try:
        with open(tv[0], "rb") as fh:
            first = fh.readline().decode("utf-8", "replace")
    except OSError as exc:
        return f"not byte-compiled ({exc})"
    python = first[2:].strip().split()[0] if first.startswith("#!") else sys.executable
    find = subprocess.run(
        [python, "-c", "import os, trtverify; print(os.path.dirname(trtverify.__file__))"],
        capture_output=True,
        text=True,
    )
    if find.returncode != 0:
        return "not byte-compiled (trtverify's package not found from its interpreter)"
    package = find.stdout.strip()
    done = subprocess.run([python, "-m", "compileall", "-q", package], capture_output=True, text=True)
    return f"byte-compiled {package}" if done.returncode == 0 else f"byte-compiling {package} failed"


def _row_name(row) -> str | None:
    if isinstance(row, dict):
        for key in ("tensor", "name", "output", "tensor_name"):
            if isinstance(row.get(key), str):
                return row[key]
    return None


def run_trtverify(ref: Path, cand: Path, npz: Path, work: Path, threads: int | None) -> dict:
    if not trtverify_available():
        return {"error": NOT_AVAILABLE}
    work.mkdir(parents=True, exist_ok=True)
    out = work / "out"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [*_trtverify_cmd(), "layerwise", str(ref), str(cand), "--inputs", str(npz), "--out", str(out)]
    m = measure(cmd, work / "layerwise", threads, work)
    results = out / "results.json"
    row = {"wall_s": m["wall_s"], "cpu_s": m["cpu_s"], "peak_mb": m["peak_mb"], "steps": [m]}
    if not results.exists() or m["rc"] not in (0, 1):
        row["error"] = (
            f"trtverify layerwise exited {m['rc']} without results.json:\n{_tail(work / 'layerwise.stderr.log')}"
        )
        return row
    data = json.loads(results.read_text())
    stage = (data.get("stages") or [{}])[0]
    # one row per compared tensor: stages[0].rows, or (as written now) stages[0].candidates[i].rows
    cands = stage.get("candidates") or []
    if isinstance(stage.get("rows"), list):
        rows, where = stage["rows"], "stages[0].rows"
    else:
        rows = [r for c in cands for r in (c.get("rows") or [])]
        where = "stages[0].candidates[*].rows"
    row["tensors_compared"] = len(rows)
    row["rows_from"] = where
    row["compared_names"] = [n for n in map(_row_name, rows) if n]
    row["verdict"] = "passed" if m["rc"] == 0 else "failed"
    row["stage_timings"] = stage.get("timings")
    if cands:
        c = cands[0]
        top = (c.get("root_causes") or [None])[0]
        row["root_cause"] = {
            "first_divergence": c.get("first_divergence"),
            "method": c.get("root_cause_method"),
            "top_suspect": {k: top.get(k) for k in ("node", "op_type", "tensor", "score")}
            if isinstance(top, dict)
            else top,
            "suspects": len(c.get("root_causes") or []),
        }
        row["unmatched"] = c.get("unmatched")
    return row


# --------------------------------------------------------------------------------------------
# aggregation and report
# --------------------------------------------------------------------------------------------


def _median_row(samples: list[dict]) -> dict:
    ok = [s for s in samples if "error" not in s]
    if not ok:
        return dict(samples[-1]) if samples else {"error": "not run"}
    last = dict(ok[-1])
    for key in ("wall_s", "cpu_s", "peak_mb"):
        last[key] = statistics.median(s[key] for s in ok)
    last["samples"] = [
        {"wall_s": round(s["wall_s"], 3), "cpu_s": round(s["cpu_s"], 3), "peak_mb": round(s["peak_mb"], 1)} for s in ok
    ]
    loads = [x for s in ok for st in s["steps"] for x in st.get("loadavg_1m", []) if x is not None]
    last["max_loadavg_1m"] = max(loads) if loads else None
    return last


def _machine() -> dict:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = None
    try:
        mem_gb = round(int(Path("/proc/meminfo").read_text().split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    versions = {"python": platform.python_version()}
    for mod in ("onnxruntime", "onnx", "numpy", "torch", "polygraphy", "trtverify"):
        try:
            versions[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001 - absent or broken: just not reported
            pass
    commit = None
    try:
        commit = (
            subprocess.run(
                ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
            ).stdout.strip()
            or None
        )
        if (
            commit
            and subprocess.run(
                ["git", "-C", str(REPO), "status", "--porcelain", "--", "trtverify"], capture_output=True, text=True
            ).stdout.strip()
        ):
            commit += "+dirty"
    except OSError:
        pass
    digest = hashlib.sha256()
    for f in sorted((REPO / "trtverify").rglob("*.py")):
        digest.update(f.relative_to(REPO).as_posix().encode() + b"\0" + f.read_bytes())
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": mem_gb,
        "os": platform.platform(),
        "versions": versions,
        "trtverify_commit": commit,
        "trtverify_sources_sha256": digest.hexdigest()[:16],
    }


def _fmt(v, spec: str) -> str:
    return "—" if v is None else format(v, spec)


def render(report: dict) -> tuple[str, str]:
    head = [
        "model",
        "tool",
        "wall s",
        "cpu s",
        "peak MB",
        "peak / FP32 weights",
        "tensors compared",
        "time ratio",
        "memory ratio",
        "note",
    ]
    lines = []
    for model, entry in report["models"].items():
        poly, tv = entry["polygraphy"], entry["trtverify"]
        for tool, row in (("polygraphy", poly), ("trtverify", tv)):
            err = row.get("error")
            note = (
                err.splitlines()[0]
                if err
                else {"failed": "FP16 flagged (exit 1)", "passed": "FP16 passed (exit 0)"}.get(row.get("verdict"), "")
            )
            if tool == "polygraphy" and not err:
                extra = row.get("shape_tensors_compared")
                if extra:
                    note += f"; {extra} of them int shape tensors"
            tr = mr = None
            if tool == "trtverify" and not err and "error" not in poly:
                tr, mr = entry["time_ratio"], entry["memory_ratio"]
                verdict = "meets" if entry["meets_target"] else "misses"
                note += f"; {verdict} target (≤{TIME_TARGET:g} time, ≤{MEM_TARGET:g} memory)"
                same = entry.get("same_tensor_set")
                if same:
                    if same["identical"]:
                        note += "; same tensors as Polygraphy"
                    else:
                        by = ", ".join(f"{n} {d}" for d, n in same["n_only_polygraphy_by_ref_dtype"].items())
                        note += (
                            f"; tensor sets differ: {same['n_only_polygraphy']} only in Polygraphy"
                            + (f" ({by})" if by else "")
                            + f", {same['n_only_trtverify']} only in trtverify"
                        )
            shown = row
            if tool == "polygraphy" and err and row.get("steps"):
                # the reference pass completed, the candidate pass did not (a proto over 2 GiB): show the first
                shown = dict(row["steps"][0])
                shown["peak_over_weights"] = shown["peak_mb"] * 2**20 / entry["model"]["fp32_weight_bytes"]
                note = "mark all: " + err.splitlines()[-1][:160]
                err = None
            if tool == "trtverify" and "time_ratio_reference_pass" in entry and "time_ratio" not in entry:
                tr, mr = entry["time_ratio_reference_pass"], entry["memory_ratio_reference_pass"]
                note += "; ratios against Polygraphy's FP32 reference pass of the outputs alone"
            lines.append(
                [
                    model,
                    tool,
                    _fmt(None if err else shown.get("wall_s"), ".2f"),
                    _fmt(None if err else shown.get("cpu_s"), ".2f"),
                    _fmt(None if err else shown.get("peak_mb"), ".0f"),
                    _fmt(None if err else shown.get("peak_over_weights"), ".2f"),
                    _fmt(None if err else shown.get("tensors_compared"), "d"),
                    _fmt(tr, ".3f"),
                    _fmt(mr, ".3f"),
                    note,
                ]
            )
        alone = entry.get("polygraphy_reference_pass")
        if alone:
            err = alone.get("error")
            lines.insert(
                len(lines) - 1,
                [
                    model,
                    "polygraphy, FP32 reference pass, outputs only",
                    _fmt(None if err else alone.get("wall_s"), ".2f"),
                    _fmt(None if err else alone.get("cpu_s"), ".2f"),
                    _fmt(None if err else alone.get("peak_mb"), ".0f"),
                    _fmt(None if err else alone.get("peak_over_weights"), ".2f"),
                    "0",
                    "—",
                    "—",
                    err or "no tensor compared: the least a Polygraphy comparison of this model costs",
                ],
            )
        same = entry.get("polygraphy_same_tensors")
        if same:
            err = same.get("error")
            lines.append(
                [
                    model,
                    "polygraphy, trtverify's tensors",
                    _fmt(None if err else same.get("wall_s"), ".2f"),
                    _fmt(None if err else same.get("cpu_s"), ".2f"),
                    _fmt(None if err else same.get("peak_mb"), ".0f"),
                    "—",
                    _fmt(None if err else same.get("tensors_compared"), "d"),
                    _fmt(entry.get("time_ratio_same_tensors"), ".3f"),
                    _fmt(entry.get("memory_ratio_same_tensors"), ".3f"),
                    err.splitlines()[0]
                    if err
                    else "the same commands marking exactly the tensors trtverify compared; "
                    "ratios = trtverify / this row",
                ]
            )
    widths = [max(len(h), *(len(r[i]) for r in lines)) for i, h in enumerate(head)] if lines else [len(h) for h in head]
    text = (
        "  ".join(h.ljust(w) for h, w in zip(head, widths))
        + "\n"
        + "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in lines)
    )
    md = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    md += ["| " + " | ".join(r) + " |" for r in lines]
    rc_lines = []
    for model, entry in report["models"].items():
        rc = entry["trtverify"].get("root_cause")
        if rc and "error" not in entry["trtverify"]:
            top = rc.get("top_suspect") or {}
            fd = rc.get("first_divergence")
            fd_txt = (
                "none (no tensor failed its checks)"
                if fd is None
                else (fd.get("tensor") or fd.get("node") or json.dumps(fd)[:120])
                if isinstance(fd, dict)
                else str(fd)
            )
            rc_lines.append(
                f"- {model}: first divergence {fd_txt}; top suspect ({rc.get('method')}) `{top.get('node')}` "
                f"({top.get('op_type')}), score {_fmt(top.get('score'), '.3g')}"
            )
    if rc_lines:
        rc_lines = ["trtverify's root-cause analysis (part of its measured run):", "", *rc_lines, ""]
    mach = report["machine"]
    v = mach["versions"]
    md_text = "\n".join(
        [
            "# trtverify layerwise vs Polygraphy (FP32 vs FP16, ONNX Runtime CPU)",
            "",
            f"Generated {report['generated']} by `{report['command']}`; median of {report['repeat']} run(s) per tool;"
            f" threads: {report['threads'] or 'all cores'}.",
            "",
            *md,
            "",
            "Models (bench/make_models.py; tensors = outputs of non-Constant nodes, "
            "what `--onnx-outputs mark all` marks): "
            + "; ".join(
                f"{m} {e['model']['tensors']['ref']} (FP32) / {e['model']['tensors']['cand']} (FP16, +2 Casts)"
                for m, e in report["models"].items()
            )
            + ". Polygraphy's default tolerance (abs = rel = 1e-5) flags FP16, so its second command exits 1; "
            "that is expected and still a complete run.",
            "",
            *rc_lines,
            f"Ratios are trtverify / Polygraphy (target: time ≤ {TIME_TARGET:g}, memory ≤ {MEM_TARGET:g}). "
            "Polygraphy's wall time is the sum of its two commands, its peak the larger of the two. "
            "Peak = peak RSS of the command's process tree, MB = 2^20 bytes;"
            " cpu s = user+system CPU seconds of the tree (less sensitive than wall time to other work on the machine)."
            f" Highest 1-minute load average seen around the measured commands: {report.get('max_loadavg_1m')}"
            f" on {report['machine']['cores']} cores. trtverify's package: {report.get('bytecode')}, as pip does"
            " for an installed tool (Polygraphy's is); its report template is compiled once and kept in the user's"
            " cache, as every run after a user's first finds it.",
            "",
            f"Machine: {mach['cpu']}, {mach['cores']} cores, {mach['memory_gb']} GB; {mach['os']}; "
            f"Python {v.get('python')},"
            f" onnxruntime {v.get('onnxruntime')}, polygraphy {v.get('polygraphy')}, numpy {v.get('numpy')};"
            f" trtverify {v.get('trtverify')} ({mach['trtverify_commit']}, "
            f"sources {mach['trtverify_sources_sha256']}).",
            "",
        ]
    )
    return text, md_text


def bench_model(name: str, repeat: int, threads: int | None, log, big_dir: Path | None = None) -> dict:
    if name == BIG:
        made = make_big.build_pair(big_dir)
        ref, cand = Path(made["fp32"]), Path(made["fp16"])
        work = big_dir / "work"
        log(f"[big] made {made['fp32_weight_bytes'] / 1e9:.2f} GB FP32 + {made['fp16_weight_bytes'] / 1e9:.2f} GB FP16")
    else:
        built = make_models.build(CACHE, names=[name])[name]
        ref, cand = built["ref"], built["cand"]
        work = CACHE / "work" / name
    counts = {"ref": make_models.tensor_counts(ref)["tensors"], "cand": make_models.tensor_counts(cand)["tensors"]}
    weights = weight_bytes(ref)
    _warm_page_cache(*[p for p in (ref, cand, Path(f"{ref}.data"), Path(f"{cand}.data")) if p.exists()])
    poly_samples, tv_samples, ref_only = [], [], []
    saved = inputs_meta = None
    npz = work / "in.npz"
    for i in range(repeat):
        log(f"[{name}] run {i + 1}/{repeat}: polygraphy ...")
        p = run_polygraphy(ref, cand, work / "polygraphy", threads)
        poly_samples.append(p)
        if "error" in p:
            log(f"[{name}]   polygraphy: {p['error'].splitlines()[0]}")
        else:
            log(
                f"[{name}]   polygraphy: {p['wall_s']:.2f} s, {p['peak_mb']:.0f} MB, "
                f"{p['tensors_compared']} tensors compared ({p['verdict']})"
            )
        if saved is None and (work / "polygraphy" / "ref.json").exists():
            saved = polygraphy_saved(work / "polygraphy")
            inputs_meta = write_npz(saved["inputs"], npz)
        if "error" in p and name == BIG:
            log(f"[{name}] run {i + 1}/{repeat}: polygraphy reference pass, graph outputs only ...")
            q = run_polygraphy_reference(ref, work / "polygraphy_ref", threads)
            ref_only.append(q)
            log(f"[{name}]   polygraphy outputs only: {q.get('wall_s', 0):.2f} s, {q.get('peak_mb', 0):.0f} MB")
            if saved is None and (work / "polygraphy_ref" / "ref.json").exists():
                saved = polygraphy_saved(work / "polygraphy_ref")
                inputs_meta = write_npz(saved["inputs"], npz)
        if not npz.exists():
            tv_samples.append({"error": "no Polygraphy inputs to share (polygraphy reference run failed)"})
            continue
        log(f"[{name}] run {i + 1}/{repeat}: trtverify layerwise ...")
        t = run_trtverify(ref, cand, npz, work / "trtverify", threads)
        tv_samples.append(t)
        if "error" in t:
            log(f"[{name}]   trtverify: {t['error'].splitlines()[0]}")
            if t["error"] == NOT_AVAILABLE:
                tv_samples = [t]
        else:
            log(
                f"[{name}]   trtverify: {t['wall_s']:.2f} s, {t['peak_mb']:.0f} MB, "
                f"{t['tensors_compared']} tensors compared ({t['verdict']})"
            )
    poly, tv = _median_row(poly_samples), _median_row(tv_samples)
    where = (lambda p: str(p.relative_to(REPO))) if name != BIG else (lambda p: f"(temporary)/{p.name}")
    entry: dict = {
        "model": {"ref": where(ref), "cand": where(cand), "tensors": counts, "fp32_weight_bytes": weights},
        "inputs": inputs_meta,
    }
    if "error" not in poly:
        compared = poly.pop("compared")
        poly["shape_tensors_compared"] = sum(1 for _n, _c, r in compared if r.startswith("int"))
        poly["compared_by_ref_dtype"] = {
            d: sum(1 for c in compared if c[2] == d) for d in sorted({c[2] for c in compared})
        }
        if saved:
            poly["ref_json_outputs"] = len(saved["ref_outputs"])
        names = [n for n, _c, _r in compared]
        if "error" not in tv and tv.get("compared_names"):
            tv_names = set(tv["compared_names"])
            ref_dtype = {n: r for n, _c, r in compared}
            only_poly = set(names) - tv_names
            entry["same_tensor_set"] = {
                "n_only_polygraphy_by_ref_dtype": {
                    d: sum(1 for n in only_poly if ref_dtype[n] == d) for d in sorted({ref_dtype[n] for n in only_poly})
                },
                "identical": tv_names == set(names),
                "only_polygraphy": sorted(set(names) - tv_names)[:50],
                "only_trtverify": sorted(tv_names - set(names))[:50],
                "n_only_polygraphy": len(set(names) - tv_names),
                "n_only_trtverify": len(tv_names - set(names)),
            }
    same_set = entry.get("same_tensor_set")
    if same_set and not same_set["identical"] and tv.get("compared_names"):
        # the issue asks for the same set of tensors: also run Polygraphy marking exactly trtverify's tensors
        outputs = sorted(tv["compared_names"])
        samples = []
        for i in range(repeat):
            log(f"[{name}] run {i + 1}/{repeat}: polygraphy marking trtverify's {len(outputs)} tensors ...")
            samples.append(run_polygraphy(ref, cand, work / "polygraphy_same", threads, outputs))
        same = _median_row(samples)
        same.pop("compared", None)
        entry["polygraphy_same_tensors"] = same
        if "error" not in same and "error" not in tv:
            entry["time_ratio_same_tensors"] = tv["wall_s"] / same["wall_s"]
            entry["memory_ratio_same_tensors"] = tv["peak_mb"] / same["peak_mb"]
    if "compared_names" in tv:
        tv["tensor_names_reported"] = len(tv.pop("compared_names"))
    entry["polygraphy"], entry["trtverify"] = poly, tv
    for row in (poly, tv):
        if "peak_mb" in row and "error" not in row:
            row["peak_over_weights"] = row["peak_mb"] * 2**20 / weights
    if ref_only:
        # `mark all` fails on `big` (the marked model is a proto over 2 GiB): the baseline is Polygraphy's FP32
        # reference pass of the graph outputs alone, the least any Polygraphy comparison of this model costs
        alone = _median_row(ref_only)
        alone["peak_over_weights"] = alone["peak_mb"] * 2**20 / weights if "error" not in alone else None
        entry["polygraphy_reference_pass"] = alone
        if "error" not in alone and "error" not in tv:
            entry["time_ratio_reference_pass"] = tv["wall_s"] / alone["wall_s"]
            entry["memory_ratio_reference_pass"] = tv["peak_mb"] / alone["peak_mb"]
    if "error" not in poly and "error" not in tv:
        entry["time_ratio"] = tv["wall_s"] / poly["wall_s"]
        entry["memory_ratio"] = tv["peak_mb"] / poly["peak_mb"]
        entry["meets_target"] = entry["time_ratio"] <= TIME_TARGET and entry["memory_ratio"] <= MEM_TARGET
    return entry


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--models", default="cnn,encoder", help="comma-separated: cnn, encoder, big [default: cnn,encoder]")
    ap.add_argument(
        "--big-dir",
        type=Path,
        default=None,
        help="folder for the temporary big model (7.4 GB on disk) [default: the system's temporary folder]",
    )
    ap.add_argument(
        "--repeat", type=int, default=3, help="runs per tool and model; the median is reported [default: 3]"
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="pin every measured command to CPUs 0..N-1 (taskset) and set *_NUM_THREADS=N [default: all cores]",
    )
    ap.add_argument(
        "--results",
        type=Path,
        default=RESULTS,
        help="folder for layerwise_vs_polygraphy.{json,md} [default: bench/results]",
    )
    ap.add_argument(
        "--trtverify", default=None, metavar="EXE", help="trtverify executable [default: the one beside this Python]"
    )
    args = ap.parse_args(argv)
    if args.trtverify:
        TRTVERIFY[:] = [args.trtverify]
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    bad = [m for m in names if m not in make_models.MODELS and m != BIG]
    if bad or not names:
        ap.error(f"unknown model(s) {bad}; choose from {[*make_models.MODELS, BIG]}")
    if args.repeat < 1:
        ap.error("--repeat must be >= 1")
    if args.threads is not None and not (1 <= args.threads <= (os.cpu_count() or 1)):
        ap.error(f"--threads must be between 1 and {os.cpu_count()}")
    if args.threads and not shutil.which("taskset"):
        ap.error("--threads needs taskset (util-linux)")

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    if not trtverify_available():
        log(f"note: {NOT_AVAILABLE} (`trtverify layerwise --help` failed); measuring Polygraphy only")
        compiled = "trtverify not available"
    else:
        compiled = bytecompile_trtverify()
        log(f"note: {compiled}")
    cmd = "python bench/layerwise_vs_polygraphy.py" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:])
    )
    t0 = time.perf_counter()
    report = {
        "generated": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": cmd,
        "repeat": args.repeat,
        "threads": args.threads,
        "targets": {"time_ratio_max": TIME_TARGET, "memory_ratio_max": MEM_TARGET},
        "bytecode": compiled,
        "machine": _machine(),
        "models": {},
    }
    for name in names:
        if name == BIG:
            import tempfile

            with tempfile.TemporaryDirectory(prefix="trtverify-big-", dir=args.big_dir) as tmp:
                report["models"][name] = bench_model(name, args.repeat, args.threads, log, Path(tmp))
        else:
            report["models"][name] = bench_model(name, args.repeat, args.threads, log)
    report["bench_wall_s"] = round(time.perf_counter() - t0, 1)
    loads = [r.get("max_loadavg_1m") for e in report["models"].values() for r in (e["polygraphy"], e["trtverify"])]
    loads = [x for x in loads if x is not None]
    report["max_loadavg_1m"] = round(max(loads), 2) if loads else None
    if loads and max(loads) > (os.cpu_count() or 1) + 0.5:
        log(
            f"warning: load average reached {max(loads):.2f} on {os.cpu_count()} cores: "
            "other work competed for the CPUs; wall times are inflated"
        )
    text, md = render(report)
    print(text)
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "layerwise_vs_polygraphy.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    (args.results / "layerwise_vs_polygraphy.md").write_text(md)
    log(f"wrote {args.results / 'layerwise_vs_polygraphy.json'} and .md ({report['bench_wall_s']} s)")
    ok = all("error" not in e["polygraphy"] for e in report["models"].values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
