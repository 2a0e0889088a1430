"""What `parse-log` and the engine readers recognise in the new corpus of real logs (tests/data/logcorpus/).

The corpus was split into a development part and a hold-out part by a fixed rule (sha256 of the file's path
inside the corpus, modulo 3 == 0: hold-out) before any rule was written from it; SPLIT.txt records the split.
Rules are written from the development part only; the hold-out figure is reported as measured.

Per log, the expected message families are the collector's (families.txt, written while reading the log, before
any rule existed); "other" is not counted. A family counts as recognised when a finding of a kind that belongs to
it, or the reader for it, fires. Reported per part: logs whose every family is recognised, recall over families,
findings per family, and the share of unrecognised lines per dialect.

    python bench/logcorpus_recognition.py [--part dev|holdout|all] [--out FILE] [--write-split]
"""

from __future__ import annotations

import argparse
import hashlib
from collections import Counter, defaultdict
from pathlib import Path

from trtverify.buildlog.parser import parse
from trtverify.config.findings import FAMILIES

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "logcorpus"


def holdout(rel: str) -> bool:
    return int(hashlib.sha256(rel.encode()).hexdigest()[:8], 16) % 3 == 0


def corpus() -> list[tuple[str, set[str]]]:
    out = []
    # parts a/ and b/ (2026-11-24, labelled per family); c/ (2026-11-25) has its own test: test_logcorpus_c.py
    for part in sorted(p for p in CORPUS.iterdir() if p.is_dir() and (p / "families.txt").exists()):
        for line in (part / "families.txt").read_text(encoding="utf-8").splitlines():
            if "\t" in line:
                name, fams = line.split("\t", 1)
                out.append((f"{part.name}/{name.strip()}", {f.strip() for f in fams.split(",") if f.strip()}))
    return out


def recognised(text: str) -> tuple[set[str], Counter, object]:
    parsed = parse(text)
    fams = {FAMILIES[f.kind] for f in parsed.findings if f.kind in FAMILIES}
    per = Counter(FAMILIES.get(f.kind, f.kind) for f in parsed.findings)
    if parsed.layers:
        fams.add("layer_info")
    if any("ForeignNode" in layer.name or "myelin" in layer.type.lower() for layer in parsed.layers):
        fams.add("myelin")
    return fams, per, parsed


def measure(part: str) -> str:
    logs = [(rel, fams) for rel, fams in corpus() if part == "all" or (part == "holdout") == holdout(rel)]
    full = 0
    hit = expected = 0
    missed: Counter = Counter()
    found_by_family: Counter = Counter()
    lines: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for rel, want in logs:
        text = (CORPUS / rel).read_bytes().decode("utf-8", errors="replace")
        got, per, parsed = recognised(text)
        want = want - {"other"}
        full += want <= got
        hit += len(want & got)
        expected += len(want)
        missed.update(want - got)
        found_by_family.update(per)
        d = lines[parsed.dialect or "none"]
        d[0] += parsed.unknown_lines
        d[1] += parsed.lines
    with_family = sum(1 for _, want in logs if want - {"other"})
    full -= len(logs) - with_family  # a log with no family but "other" is not counted as recognised
    out = [f"part {part}: {len(logs)} logs, {with_family} with a named family",
           f"  every family recognised: {full} of {with_family}"]  # fmt: skip
    out.append(f"  families recognised: {hit} of {expected} ({hit / max(expected, 1):.0%})")
    out.append("  families missed: " + ", ".join(f"{k} {v}" for k, v in missed.most_common()))
    out.append("  findings per family/kind: " + ", ".join(f"{k} {v}" for k, v in found_by_family.most_common()))
    out.append("  unrecognised lines per dialect: " + ", ".join(
        f"{k} {u}/{n} ({u / max(n, 1):.0%})" for k, (u, n) in sorted(lines.items())))  # fmt: skip
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=["dev", "holdout", "all"], default="dev")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--write-split", action="store_true", help="(re)write tests/data/logcorpus/SPLIT.txt")
    args = ap.parse_args()
    if args.write_split:
        rows = [f"{'holdout' if holdout(rel) else 'dev'}\t{rel}" for rel, _ in corpus()]
        (CORPUS / "SPLIT.txt").write_text("\n".join(rows) + "\n", encoding="utf-8")
    text = measure(args.part)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
