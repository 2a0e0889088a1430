"""Engine audit and diff at scale: `trtverify engine audit` / `engine diff` on engines of about 100, 500 and
2000 layers made from the real trtexec exports, beside TensorRT Engine Explorer (TREx) where it runs.

The engines (written to a temporary folder, never committed): the five real ResNet builds of
tests/data/engine_exports (fp32, fp16, qat, qat-residual, qat-residual-qgap; 32/36/37/26/24 layers) laid one
after another in "slots", cut to exactly N layers. Slot s of engine A holds build s mod 5, slot s of engine B
holds build (s+1) mod 5, so `engine diff A --vs B` compares every build with the next one at once. Every name in
slot s (layer names and each of their fused parts, the layer a reformat feeds, tensor and binding names) gets the
suffix `_s<s>`, so names are unique and the two engines' ONNX node names line up slot by slot; the
`--exportProfile` file lists the same layers with their real average times.

Measured, each the median of --repeat runs, the tools alternating in every repeat:
  trtverify API  in this process: audit([A]), diff([A], [B]) (after one untimed call per engine)
  trtverify CLI  a fresh process: trtverify engine audit A --json / trtverify engine diff A --vs B --json
                 (stdout captured and parsed; the interpreter start-up floor, `trtverify --version`, beside it)
  TREx           trt-engine-explorer 0.1.5 from PyPI, in its own venv (it pins numpy<2 and pandas<2), a fresh
                 process per run: `import trex`, then for audit EnginePlan(graph, profile) plus its four linters
                 (Conv, Reformat, QDQ, Slice), for diff two EnginePlans plus match_layers + aligned_merge_plans
                 (what its compare_engines_layer_latencies shows), twice: the second (warm) run is its API time.
                 It has no command line; its end-to-end time is the process's wall time less the warm rerun.
                 Runs past --peer-timeout are stopped and reported as such.
Ratios: trtverify / TREx.

Setting up the peer (once; it is not in bench/requirements.txt because it cannot share the project's venv):
  python3.11 -m venv bench/.cache/trex-venv
  bench/.cache/trex-venv/bin/pip install trt-engine-explorer==0.1.5 "dash<3" "ipywidgets<8"
(as published, `import trex` fails: dtale pulls a dash 4 that dash_colorscales cannot load, and TREx's own
ipywidgets==8.0.2 pin breaks the qgrid it also requires; the two extra pins are the only change.)

Usage: python bench/engine_audit.py [--sizes 100,500,2000] [--repeat 3] [--out FILE] [--trex-python PY]
                                    [--peer-timeout 60]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from benchinfo import machine  # noqa: E402 (beside this script)

from trtverify.engine.audit import audit  # noqa: E402
from trtverify.engine.diff import diff  # noqa: E402

EXPORTS = REPO / "tests" / "data" / "engine_exports"
BUILDS = ("fp32", "fp16", "qat", "qat-residual", "qat-residual-qgap")
TREX_VENV_PY = HERE / ".cache" / "trex-venv" / "bin" / "python"
REFORMAT = re.compile(r"^(Reformatting CopyNode for (?:Input|Output) Tensor \d+ to )(.+)$")
FOREIGN = re.compile(r"^\{ForeignNode\[(.*)\]\}$")
TARGET_S = 1.0  # issue: audit and diff of a 100-layer engine under 1 s

# The peer's worker: runs in TREx's venv, prints one JSON line. Only TREx's documented entry points.
TREX_WORKER = r"""
import json, sys, time, warnings
warnings.filterwarnings("ignore")
t0 = time.perf_counter()
import trex
from trex.compare_engines import aligned_merge_plans, match_layers
from trex.lint import ConvLinter, QDQLinter, ReformatLinter, SliceLinter
t1 = time.perf_counter()
op, a_graph, a_prof = sys.argv[1:4]
out = {"import_s": t1 - t0, "trex": trex.__version__}


def job():
    if op == "audit":
        plan = trex.EnginePlan(a_graph, a_prof)
        found = {L.__name__: len(L(plan).lint()) for L in (ConvLinter, ReformatLinter, QDQLinter, SliceLinter)}
        types = trex.group_count(plan.df, "type")
        return dict(layers=len(plan.df), total_ms=round(float(plan.total_runtime), 6), lint=found, types=len(types))
    b_graph, b_prof = sys.argv[4:6]
    p1 = trex.EnginePlan(a_graph, a_prof, name="A")
    p2 = trex.EnginePlan(b_graph, b_prof, name="B")
    pairs = match_layers(p1, p2, True)
    merged = aligned_merge_plans(p1, p2, pairs)
    return dict(layers=[len(p1.df), len(p2.df)], pairs=len(pairs), rows=len(merged),
                matched=sum(1 for a, b in pairs if a is not None and b is not None))


out.update(job())
t2, c2 = time.perf_counter(), time.process_time()
job()  # the same job again, warm: compared with trtverify's warm in-process call
out["first_s"], out["work_s"], out["work_cpu_s"] = t2 - t1, time.perf_counter() - t2, time.process_time() - c2
print(json.dumps(out))
"""


# --------------------------------------------------------------------------------------------
# the engines
# --------------------------------------------------------------------------------------------


def _rename(name: str, tag: str) -> str:
    """`name` with every fused part suffixed (a reformat keeps its prefix and renames the layer it serves)."""
    m = REFORMAT.match(name)
    if m:
        return m.group(1) + _rename(m.group(2), tag)
    m = FOREIGN.match(name)
    if m:
        return "{ForeignNode[" + "...".join(p + tag for p in m.group(1).split("...")) + "]}"
    return " + ".join(p.strip() + tag for p in name.split(" + "))


def _load_build(build: str) -> tuple[dict, list]:
    folder = EXPORTS / build
    info = json.loads(next(folder.glob("*.engine.graph.json")).read_text())
    prof = json.loads(next(folder.glob("*.engine.profile.json")).read_text())
    return info, prof


def _tagged_layer(layer: dict, tag: str) -> dict:
    out = {**layer, "Name": _rename(str(layer["Name"]), tag)}
    for key in ("Inputs", "Outputs"):
        if isinstance(layer.get(key), list):
            out[key] = [{**t, "Name": f"{t['Name']}{tag}"} if isinstance(t, dict) and "Name" in t else t
                        for t in layer[key]]  # fmt: skip
    return out


def make_engine(folder: Path, n_layers: int, shift: int, builds: dict) -> dict:
    """Write an N-layer engine (graph + profile) into `folder`; slot s holds build (s + shift) mod 5."""
    folder.mkdir(parents=True, exist_ok=True)
    layers, times, bindings, reformats, slot = [], [{"count": 1}], [], 0, 0
    while len(layers) < n_layers:
        info, prof = builds[BUILDS[(slot + shift) % len(BUILDS)]]
        tag = f"_s{slot}"
        avg = {str(t["name"]): t for t in prof[1:] if isinstance(t, dict) and "name" in t}
        bindings += [f"{b}{tag}" for b in info.get("Bindings", [])]
        for layer in info["Layers"][: n_layers - len(layers)]:
            new = _tagged_layer(layer, tag)
            layers.append(new)
            reformats += new.get("LayerType") == "Reformat"
            if layer["Name"] in avg:
                times.append({**avg[layer["Name"]], "name": new["Name"]})
        slot += 1
    (folder / "engine.graph.json").write_text(json.dumps({"Layers": layers, "Bindings": bindings}))
    (folder / "engine.profile.json").write_text(json.dumps(times))
    total = sum(float(t["averageMs"]) for t in times[1:])
    return {"dir": folder, "layers": len(layers), "reformats": reformats, "slots": slot, "total_ms": total,
            "bytes": sum(f.stat().st_size for f in folder.iterdir())}  # fmt: skip


def make_engines(root: Path, sizes: list[int]) -> dict[int, tuple[dict, dict]]:
    builds = {b: _load_build(b) for b in BUILDS}
    return {n: (make_engine(root / f"A{n}", n, 0, builds), make_engine(root / f"B{n}", n, 1, builds)) for n in sizes}


# --------------------------------------------------------------------------------------------
# the tools
# --------------------------------------------------------------------------------------------


def _trtverify_exe() -> list[str]:
    exe = Path(sys.executable).parent / "trtverify"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "trtverify"]


def time_api(a: dict, b: dict) -> dict:
    t0, c0 = time.perf_counter(), time.process_time()
    au = audit([a["dir"]])
    t1, c1 = time.perf_counter(), time.process_time()
    d = diff([a["dir"]], [b["dir"]])
    t2, c2 = time.perf_counter(), time.process_time()
    assert au.layers == a["layers"] and abs((au.total_ms or 0) - a["total_ms"]) < 1e-6, "audit miscounted the engine"
    return {"audit_s": t1 - t0, "diff_s": t2 - t1, "audit_cpu_s": c1 - c0, "diff_cpu_s": c2 - c1,
            "findings": len(au.findings), "groups": len(d.rows)}  # fmt: skip


def _run(cmd: list[str], timeout: float | None = None) -> tuple[float, subprocess.CompletedProcess | None]:
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        return time.perf_counter() - t0, None
    return time.perf_counter() - t0, p


def time_cli(a: dict, b: dict) -> dict:
    tv = _trtverify_exe()
    wa, pa = _run([*tv, "engine", "audit", str(a["dir"]), "--json"])
    wd, pd = _run([*tv, "engine", "diff", str(a["dir"]), "--vs", str(b["dir"]), "--json"])
    for p in (pa, pd):
        if p is None or p.returncode != 0:
            raise RuntimeError(f"trtverify failed: {p.stderr if p else 'timeout'}")
    assert json.loads(pa.stdout)["layers"] == a["layers"] and json.loads(pd.stdout)["rows"]
    return {"audit_s": wa, "diff_s": wd}


def time_floor() -> float:
    w, p = _run([*_trtverify_exe(), "--version"])
    assert p is not None and p.returncode == 0
    return w


def time_trex(py: str, op: str, a: dict, b: dict, timeout: float) -> dict:
    args = [str(a["dir"] / "engine.graph.json"), str(a["dir"] / "engine.profile.json")]
    if op == "diff":
        args += [str(b["dir"] / "engine.graph.json"), str(b["dir"] / "engine.profile.json")]
    wall, p = _run([py, "-c", TREX_WORKER, op, *args], timeout)
    if p is None:
        return {"timeout": True, "wall_s": wall}
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or ["?"])[-1], "wall_s": wall}
    out = json.loads(p.stdout.strip().splitlines()[-1])
    # the process as if it had done the job once (start-up, import, first run): its wall less the warm rerun
    return {**out, "wall_s": wall - out["work_s"]}


def trex_status(py: str | None) -> tuple[str | None, str]:
    """(python to run TREx with, or None; why)."""
    if not py or not Path(py).exists():
        return None, (
            "no TREx environment here (expected bench/.cache/trex-venv, see the module docstring; "
            "`pip download --no-deps trt-engine-explorer` finds 0.1.5 on PyPI)"
        )
    p = subprocess.run([py, "-c", "import trex; print(trex.__version__)"], capture_output=True, text=True)
    if p.returncode != 0:
        return None, f"`import trex` fails in {py}: {(p.stderr.strip().splitlines() or ['?'])[-1]}"
    v = subprocess.run([py, "-m", "pip", "show", "trt-engine-explorer"], capture_output=True, text=True).stdout
    dist = next((ln.split(":", 1)[1].strip() for ln in v.splitlines() if ln.startswith("Version:")), "?")
    pd = subprocess.run([py, "-c", "import pandas, numpy; print(pandas.__version__, numpy.__version__)"],
                        capture_output=True, text=True).stdout.split()  # fmt: skip
    return py, f"trt-engine-explorer {dist} (trex.__version__ {p.stdout.strip()}), pandas {pd[0]}, numpy {pd[1]}"


# --------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------


def _med(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _fmt(v: float | None, unit: str = "s") -> str:
    if v is None:
        return "—"
    return f"{v * 1000:.1f} ms" if unit == "ms" else f"{v:.3f} s"


def render(res: dict) -> tuple[str, str]:
    head = ["layers (A / B)", "op", "trtverify API", "TREx API", "ratio", "trtverify CLI --json",
            "TREx process", "ratio"]  # fmt: skip
    rows = []
    for e in res["sizes"].values():
        for op in ("audit", "diff"):
            api, cli = _med(e["api"][f"{op}_s"]), _med(e["cli"][f"{op}_s"])
            tx = e.get("trex", {}).get(op)
            work = proc = None
            note = ""
            if tx is None:
                note = "—"
            elif tx.get("timeout"):
                note = f"> {res['peer_timeout']:.0f} s (stopped)"
            elif tx.get("error"):
                note = "error: " + tx["error"][:60]
            else:
                work, proc = _med(tx["work_s"]), _med(tx["wall_s"])
            rows.append([
                f"{e['a']['layers']} / {e['b']['layers']}" if op == "diff" else str(e["a"]["layers"]), op,
                _fmt(api, "ms"), note or _fmt(work, "ms"), f"**{api / work:.3f}**" if work and api else "—",
                _fmt(cli, "ms"), note or _fmt(proc, "ms"), f"**{cli / proc:.3f}**" if proc and cli else "—",
            ])  # fmt: skip
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    text = "  ".join(h.ljust(w) for h, w in zip(head, widths)) + "\n"
    text += "\n".join("  ".join(c.replace("**", "").ljust(w) for c, w in zip(r, widths)) for r in rows)
    md = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    md += ["| " + " | ".join(r) + " |" for r in rows]
    return text, "\n".join(md)


def cpu_table(res: dict) -> str:
    md = ["| layers | op | trtverify API CPU | TREx API CPU | ratio |", "|---|---|---|---|---|"]
    for e in res["sizes"].values():
        for op in ("audit", "diff"):
            ours = _med(e["api"][f"{op}_cpu_s"])
            theirs = _med(e.get("trex", {}).get(op, {}).get("cpu_s", []))
            ratio = f"{ours / theirs:.3f}" if ours and theirs else "—"
            md.append(f"| {e['a']['layers']} | {op} | {_fmt(ours, 'ms')} | {_fmt(theirs, 'ms')} | {ratio} |")
    return "\n".join(md)


def write_md(res: dict, table: str, out: Path) -> None:
    n0 = min(res["sizes"])
    e0 = res["sizes"][n0]
    api_ok = max(_med(e0["api"]["audit_s"]), _med(e0["api"]["diff_s"])) < TARGET_S
    cli_ok = max(_med(e0["cli"]["audit_s"]), _med(e0["cli"]["diff_s"])) < TARGET_S
    engines = "; ".join(
        f"{n}: A {e['a']['layers']} layers ({e['a']['reformats']} Reformat, {e['a']['slots']} slots, "
        f"{e['a']['bytes'] / 1e6:.2f} MB), B {e['b']['layers']} ({e['b']['reformats']} Reformat)"
        for n, e in res["sizes"].items()
    )
    lines = [
        "# `trtverify engine audit` / `engine diff` at scale",
        "",
        f"Generated {res['date']} by `{res['command']}`: median of {res['repeat']} repeats, the tools alternating "
        "in every repeat. Machine: " + res["machine"] + f". 1-minute load average {res['load'][0]:.2f} before, "
        f"{res['load'][1]:.2f} after, on 2 cores shared with other work; {res['total_s']:.0f} s in all.",
        "",
        table,
        "",
        "CPU seconds of the same API calls (user + system of the process; less sensitive than wall time to other "
        "work on the machine):",
        "",
        cpu_table(res),
        "",
        f"**Issue acceptance (audit and diff of a {e0['a']['layers']}-layer engine under {TARGET_S:.0f} s):** "
        + ("met" if api_ok and cli_ok else "NOT met")
        + f" — API {_fmt(_med(e0['api']['audit_s']), 'ms')} / {_fmt(_med(e0['api']['diff_s']), 'ms')}, "
        f"CLI end to end {_fmt(_med(e0['cli']['audit_s']), 'ms')} / {_fmt(_med(e0['cli']['diff_s']), 'ms')} "
        f"(the CLI's start-up floor, `trtverify --version`, is {_fmt(_med(res['floor_s']), 'ms')}).",
        "",
        "## Peer",
        "",
        res["peer"],
        "",
        "## What was measured",
        "",
        f"- Engines: {engines}. Each engine is the five real ResNet builds of `tests/data/engine_exports` one after "
        "another (slot s of A = build s mod 5, of B = build s+1 mod 5), every name suffixed `_s<slot>`, cut to "
        "exactly N layers; the profile lists the same layers with their real averageMs. Written to a temporary "
        "folder and removed afterwards.",
        "- trtverify API: `audit([A])` and `diff([A], [B])` in the bench's process, after one untimed call per "
        "engine; includes reading both JSON files, the findings and (diff) auditing both builds.",
        "- trtverify CLI: `trtverify engine audit A --json` and `trtverify engine diff A --vs B --json`, a fresh "
        "process each, stdout captured and parsed; wall time includes Python start-up and imports.",
        "- TREx API: in a fresh process after `import trex` (the import alone: "
        + (f"{_fmt(res['trex_import_s'])} median" if res.get("trex_import_s") else "—")
        + "), the job run twice and the second, warm run timed (as trtverify's API call is warm): audit = "
        "`EnginePlan(graph, profile)` + `ConvLinter`, `ReformatLinter`, `QDQLinter`, `SliceLinter` `.lint()` + "
        "`group_count(df, 'type')`; diff = two `EnginePlan`s + `match_layers(p1, p2, True)` + "
        "`aligned_merge_plans` (the table behind its `compare_engines_layer_latencies`).",
        "- TREx process: TREx has no command line; this is the worker process's wall time less the warm rerun, "
        "i.e. start-up, `import trex` and the first run: the end-to-end figure beside trtverify's CLI.",
        "- Ratios are trtverify / TREx (below 1: trtverify is faster).",
        "- The jobs are alike, not identical: TREx builds pandas DataFrames of every layer attribute and aligns two "
        "plans by a beam search over layer signatures (type and tensor shapes); trtverify groups layers by the "
        "ONNX nodes they implement (union-find) and computes its own findings. Both read the same files.",
        "",
    ]
    out.write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    ap.add_argument("--sizes", default="100,500,2000", help="engine sizes in layers [default: 100,500,2000]")
    ap.add_argument("--repeat", type=int, default=3, help="runs per tool and size; the median is reported [3]")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "engine_audit.md", help="markdown results file")
    ap.add_argument("--trex-python", default=str(TREX_VENV_PY), help="Python of a venv with trt-engine-explorer")
    ap.add_argument("--peer-timeout", type=float, default=60.0, help="seconds before a TREx run is stopped [60]")
    args = ap.parse_args(argv)
    sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    if args.repeat < 1 or not sizes or min(sizes) < 1:
        ap.error("--repeat and --sizes must be positive")
    py, peer = trex_status(args.trex_python)
    print(f"peer: {peer}", file=sys.stderr)
    res: dict = {
        "date": _dt.date.today().isoformat(),
        "command": "python bench/engine_audit.py"
        + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:])),
        "repeat": args.repeat,
        "machine": machine(),
        "peer_timeout": args.peer_timeout,
        "floor_s": [],
        "sizes": {},
    }
    imports = []
    res["load"] = [os.getloadavg()[0]]
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="trtverify-engine-bench-") as tmp:
        engines = make_engines(Path(tmp), sizes)
        for n, (a, b) in engines.items():
            api = {k: [] for k in ("audit_s", "diff_s", "audit_cpu_s", "diff_cpu_s")}
            e = res["sizes"][n] = {"a": a, "b": b, "api": api, "cli": {"audit_s": [], "diff_s": []}}
            if py:
                e["trex"] = {op: {"work_s": [], "wall_s": [], "cpu_s": []} for op in ("audit", "diff")}
            time_api(a, b)  # untimed: lazy imports and first-call costs
            for r in range(args.repeat):
                steps = ["api", "cli", "trex"] if py else ["api", "cli"]
                steps = steps[r % len(steps) :] + steps[: r % len(steps)]
                for step in steps:
                    if step == "api":
                        t = time_api(a, b)
                        for k in ("audit_s", "diff_s", "audit_cpu_s", "diff_cpu_s"):
                            e["api"][k].append(t[k])
                    elif step == "cli":
                        t = time_cli(a, b)
                        e["cli"]["audit_s"].append(t["audit_s"])
                        e["cli"]["diff_s"].append(t["diff_s"])
                        res["floor_s"].append(time_floor())
                    else:
                        for op in ("audit", "diff"):
                            slot = e["trex"][op]
                            if slot.get("timeout") or slot.get("error"):
                                continue  # one stopped run is enough to say so
                            t = time_trex(py, op, a, b, args.peer_timeout)
                            if t.get("timeout") or t.get("error"):
                                slot.update(t)
                                continue
                            slot["work_s"].append(t["work_s"])
                            slot["wall_s"].append(t["wall_s"])
                            slot["cpu_s"].append(t["work_cpu_s"])
                            slot["result"] = {k: t[k] for k in ("layers", "pairs", "matched", "lint") if k in t}
                            imports.append(t["import_s"])
                print(f"[{n} layers] repeat {r + 1}/{args.repeat} done ({time.perf_counter() - t_start:.0f} s)",
                      file=sys.stderr, flush=True)  # fmt: skip
        for e in res["sizes"].values():
            for side in ("a", "b"):
                e[side]["dir"] = e[side]["dir"].name
    res["trex_import_s"] = _med(imports)
    res["load"].append(os.getloadavg()[0])
    res["total_s"] = time.perf_counter() - t_start
    res["peer"] = peer_text(res, py, peer)
    text, md = render(res)
    print(text)
    print(f"\nCLI start-up floor (trtverify --version): {_fmt(_med(res['floor_s']), 'ms')}; "
          f"total bench time {time.perf_counter() - t_start:.0f} s")  # fmt: skip
    write_md(res, md, args.out)
    print(f"written: {args.out}")
    return 0


def peer_text(res: dict, py: str | None, peer: str) -> str:
    if not py:
        return (f"No peer ran here: {peer}. The figures above are trtverify's absolute times; nothing stands in "
                "for the peer.")  # fmt: skip
    parts = [
        f"TensorRT Engine Explorer ran: {peer}, in its own venv (`bench/.cache/trex-venv`; it pins numpy<2 and "
        "pandas<2, so it cannot share the project's). TensorRT 11.1 removed TREx from its repository, but "
        "`trt-engine-explorer` 0.1.5 is on PyPI: NVIDIA's TREx code (release/8.6 per its metadata) packaged by a "
        "third party (author field Silky Arora). As published, "
        "`import trex` fails (dtale's dash 4 cannot load dash_colorscales; TREx's ipywidgets==8.0.2 pin breaks "
        'its qgrid); `"dash<3" "ipywidgets<8"` fixes both, and no TREx code is changed.',
    ]
    for n, e in res["sizes"].items():
        for op in ("audit", "diff"):
            tx = e.get("trex", {}).get(op, {})
            if tx.get("result"):
                parts.append(f"- {n} layers, {op}: TREx result {json.dumps(tx['result'])}")
            if tx.get("timeout"):
                parts.append(f"- {n} layers, {op}: TREx stopped after {res['peer_timeout']:.0f} s (one run)")
    return "\n".join(parts)


if __name__ == "__main__":
    raise SystemExit(main())
