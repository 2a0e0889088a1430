"""Does a log template miner (Drain, the `drain3` package) group the floor's warning and error lines better than
the floor's own template (trtverify/buildlog/floor.py: quoted names, paths, hex and numbers taken out)?

Over every log of the corpus (tests/data/logcorpus/*/, tests/data/buildlogs/), the lines the floor marks as a
warning or an error are grouped per log both ways (a fresh Drain miner per log, drain3's default configuration:
depth 4, similarity 0.4). Reported: lines, groups each way, the time each takes, and the disagreements: Drain
clusters that join lines of different floor templates (Drain merges more), and floor templates Drain splits,
with examples to judge by eye. drain3 is not a dependency of trtverify; install it beside the bench:

    pip install --target /tmp/drain drain3==0.9.11 && PYTHONPATH=.:/tmp/drain python bench/floor_grouping_drain.py
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from pathlib import Path

from trtverify.buildlog.floor import _marked, template
from trtverify.buildlog.lines import split_records

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"


def main() -> None:
    try:
        from drain3 import TemplateMiner
        from drain3.template_miner_config import TemplateMinerConfig
    except ImportError:
        print("drain3 is not installed (pip install --target DIR drain3; PYTHONPATH=.:DIR)", file=sys.stderr)
        sys.exit(3)
    paths = sorted(DATA.glob("logcorpus/*/*.log")) + sorted(DATA.glob("buildlogs/**/*.log"))
    lines = groups_floor = groups_drain = 0
    t_floor = t_drain = 0.0
    merged: list[tuple[str, list[str]]] = []
    split: list[tuple[str, list[str]]] = []
    for p in paths:
        records = split_records(p.read_text(encoding="utf-8", errors="replace"))
        texts = [r.text.strip().split("\n")[0] for r, _ in _marked(records)]
        if not texts:
            continue
        lines += len(texts)
        t0 = time.perf_counter()
        floor = [template(t) for t in texts]  # since issue 47 with unquoted names taken out too
        t_floor += time.perf_counter() - t0
        cfg = TemplateMinerConfig()
        cfg.profiling_enabled = False
        miner = TemplateMiner(config=cfg)
        t0 = time.perf_counter()
        drain = [miner.add_log_message(t)["cluster_id"] for t in texts]
        t_drain += time.perf_counter() - t0
        groups_floor += len(set(floor))
        groups_drain += len(set(drain))
        by_drain: dict[int, set[str]] = defaultdict(set)
        by_floor: dict[str, set[int]] = defaultdict(set)
        example: dict[str, str] = {}
        for f, d, t in zip(floor, drain, texts, strict=True):
            by_drain[d].add(f)
            by_floor[f].add(d)
            example.setdefault(f, t)
        for fs in by_drain.values():
            if len(fs) > 1:
                merged.append((p.name, [example[f][:140] for f in sorted(fs)][:3]))
        for f, ds in by_floor.items():
            if len(ds) > 1:
                split.append((p.name, [example[f][:140]]))
    print(f"{len(paths)} logs, {lines} warning/error lines")
    print(f"floor template: {groups_floor} groups, {t_floor * 1e3:.1f} ms")
    print(f"drain3 (default config): {groups_drain} groups, {t_drain * 1e3:.1f} ms")
    print(
        f"drain clusters joining different floor templates: {len(merged)}; floor templates drain splits: {len(split)}"
    )
    for name, ex in merged[:12]:
        print(f"  merged in {name}:")
        for e in ex:
            print(f"    {e}")
    for name, ex in split[:8]:
        print(f"  split in {name}: {ex[0]}")


if __name__ == "__main__":
    main()
