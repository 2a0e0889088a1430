r"""Parse speed of `trtverify.buildlog.parser.parse` in MB/s over every log of the corpus (tests/data/logcorpus/*/
and tests/data/buildlogs/), best of `--repeat` passes (the machine is shared: the best pass is the least disturbed).

    python bench/logparse_speed.py [--repeat 5] [--big-mb 4] [--cpu] [--label NAME] [--out FILE.json]

Before/after on a shared machine (load changes 3x within minutes): `--ab MODULE` imports an older tree's parser
under another package name (a copy of the old trtverify/ with `trtverify.` renamed, e.g. `trtverify_before`, on
PYTHONPATH) and alternates its passes with this tree's in one process, so both see the same load:

    git archive OLD trtverify | tar -x -C /tmp/old && mv /tmp/old/trtverify /tmp/old/trtverify_before
    sed -i -E 's/\btrtverify\./trtverify_before./g' $(grep -rl trtverify /tmp/old/trtverify_before --include=*.py)
    PYTHONPATH=.:/tmp/old python bench/logparse_speed.py --ab trtverify_before.buildlog.parser

Each pass parses every log once, in-process, from text already read; MB/s = corpus bytes / seconds of the pass.
`--cpu` times passes by the process's CPU time (time.process_time) instead of the wall clock: on a machine whose load
changes within minutes, the time spent waiting for a core is then not counted (use it with --ab).
Also reported: the same for the largest log repeated to ~4 MB (a long verbose build: how parse time scales).
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from trtverify.buildlog.parser import parse

ROOT = Path(__file__).resolve().parents[1]
CLOCK: Callable[[], float] = time.perf_counter  # --cpu: time.process_time
DATA = ROOT / "tests" / "data"


def corpus() -> list[str]:
    paths = sorted(DATA.glob("logcorpus/*/*.log")) + sorted(DATA.glob("buildlogs/**/*.log"))
    return [p.read_text(encoding="utf-8", errors="replace") for p in paths]


def best_pass(texts: list[str], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = CLOCK()
        for t in texts:
            parse(t)
        best = min(best, CLOCK() - t0)
    return best


def ab(texts: list[str], args: argparse.Namespace) -> None:
    """Passes of the old parser and this one, alternated; best of each, and the ratio."""
    import importlib

    old = importlib.import_module(args.ab).parse
    size = sum(len(t.encode()) for t in texts) / 1e6
    big_one = max(texts, key=len)
    big = [big_one * max(1, int(args.big_mb * 1e6 // len(big_one.encode())))] if args.big_mb else []
    best = {"old": [float("inf")] * 2, "new": [float("inf")] * 2}
    pair = [("old", old), ("new", parse)]
    for r in range(args.repeat):
        for name, fn in pair if r % 2 == 0 else pair[::-1]:  # neither always runs first
            for i, batch in enumerate((texts, big)):
                if not batch:
                    continue
                gc.collect()  # the last pass's garbage is not this pass's cost
                t0 = CLOCK()
                for t in batch:
                    fn(t)
                best[name][i] = min(best[name][i], CLOCK() - t0)
    row = {
        "label": args.label or "interleaved A/B",
        "old": args.ab,
        "clock": "cpu" if args.cpu else "wall",
        "repeat": args.repeat,
        "corpus_mb": round(size, 3),
        "corpus_mb_per_s_old": round(size / best["old"][0], 3),
        "corpus_mb_per_s_new": round(size / best["new"][0], 3),
        "corpus_time_ratio": round(best["new"][0] / best["old"][0], 3),
    }
    if big:
        mb = len(big[0].encode()) / 1e6
        row.update(
            big_mb=round(mb, 3),
            big_mb_per_s_old=round(mb / best["old"][1], 3),
            big_mb_per_s_new=round(mb / best["new"][1], 3),
            big_time_ratio=round(best["new"][1] / best["old"][1], 3),
        )
    print(json.dumps(row))
    if args.out:
        rows = json.loads(args.out.read_text()) if args.out.exists() else []
        rows.append(row)
        args.out.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--label", default="")
    ap.add_argument("--big-mb", type=float, default=4.0, help="size of the repeated largest log (0: skip it)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--ab", metavar="MODULE", help="an older tree's parser module: alternate passes with it")
    ap.add_argument("--cpu", action="store_true", help="time by the process's CPU time, not the wall clock")
    args = ap.parse_args()
    global CLOCK
    CLOCK = time.process_time if args.cpu else time.perf_counter
    texts = corpus()
    if args.ab:
        ab(texts, args)
        return
    size = sum(len(t.encode()) for t in texts) / 1e6
    secs = best_pass(texts, args.repeat)
    big_one = max(texts, key=len)
    big = big_one * max(1, int(args.big_mb * 1e6 // len(big_one.encode()))) if args.big_mb else ""
    big_secs = best_pass([big], max(1, args.repeat // 2)) if big else float("nan")
    import trtverify

    tree = Path(trtverify.__file__).resolve().parents[1]
    commit = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    row = {
        "label": args.label,
        "commit": commit.stdout.strip() or str(tree),
        "logs": len(texts),
        "corpus_mb": round(size, 3),
        "corpus_s": round(secs, 3),
        "corpus_mb_per_s": round(size / secs, 3),
        "big_mb": round(len(big.encode()) / 1e6, 3),
        "big_s": round(big_secs, 3) if big else None,
        "big_mb_per_s": round(len(big.encode()) / 1e6 / big_secs, 3) if big else None,
    }
    print(json.dumps(row))
    if args.out:
        rows = json.loads(args.out.read_text()) if args.out.exists() else []
        rows.append(row)
        args.out.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
