"""Sharded runs: `trtverify run SUITE --shard I/N` runs a deterministic part of a suite, and
`trtverify merge DIR...` combines the shards' results into one.

What a shard runs:
- the tensor stages are split into whole cases: `framework` is one case, `layerwise` one case
  per candidate, `buildlog` one case; case k (in that order) goes to shard (k mod N) + 1;
- `e2e` is split into contiguous dataset slices along batch boundaries, so every batch holds
  the same samples as in an unsharded run and the models compute the same numbers.

An e2e shard also writes the raw predictions of every model (`shard/e2e-<k>.npz`: scores for
classification, post-processed detections for detection). `merge` replays them into the
metric accumulators, so COCO metrics are computed over the union of all detections, not
averaged over shards, and equal the unsharded run's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.errors import UsageError

SHARD_DIR = "shard"


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based, as on the command line
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
        if not m:
            raise UsageError(f"--shard {text!r}: expected I/N, e.g. 1/4 (shard I of N, counted from 1)")
        i, n = int(m.group(1)), int(m.group(2))
        if n < 1 or not 1 <= i <= n:
            raise UsageError(f"--shard {text}: I must be between 1 and N (N >= 1)")
        return cls(i, n)

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "count": self.count}


def cases(loaded: Any) -> list[tuple[str, str | None]]:
    """The whole cases of the tensor stages, in a fixed order: (stage, candidate or None)."""
    suite = loaded.suite
    out: list[tuple[str, str | None]] = []
    if suite.stages.framework is not None:
        out.append(("framework", None))
    if suite.stages.layerwise is not None:
        cfg = suite.stages.layerwise
        out += [("layerwise", n) for n in suite.candidates_of(cfg)]
    if suite.stages.buildlog is not None:
        out.append(("buildlog", None))
    return out


def owner(loaded: Any, case: tuple[str, str | None], count: int) -> int:
    """The shard (1-based) that runs a case."""
    return cases(loaded).index(case) % count + 1


def owns(shard: Shard | None, loaded: Any, case: tuple[str, str | None]) -> bool:
    return shard is None or owner(loaded, case, shard.count) == shard.index


def e2e_slice(total: int, batch_size: int, shard: Shard | None) -> range:
    """The dataset positions of a shard: whole batches, the batches split as evenly as possible."""
    if shard is None:
        return range(total)
    nb = -(-total // batch_size)
    lo, hi = (shard.index - 1) * nb // shard.count, shard.index * nb // shard.count
    return range(min(lo * batch_size, total), min(hi * batch_size, total))


# raw e2e predictions of one model in one shard: no pickle, plain arrays


def save_predictions(path: Path, task: str, record: dict[int, np.ndarray]) -> None:
    from trtverify.fsutil import atomic_write

    index = np.array(sorted(record), dtype=np.int64)
    arrays: dict[str, np.ndarray]
    if task == "classification":
        scores = np.stack([record[i] for i in index]) if len(index) else np.zeros((0, 0), np.float32)
        arrays = {"task": np.array(task), "index": index, "scores": scores}
    else:
        dets = [np.asarray(record[i], dtype=np.float64).reshape(-1, 6) for i in index]
        offsets = np.cumsum([0] + [len(d) for d in dets]).astype(np.int64)
        arrays = {
            "task": np.array(task),
            "index": index,
            "offsets": offsets,
            "dets": np.concatenate(dets) if dets else np.zeros((0, 6)),
        }
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda f: np.savez(f, **arrays))


def load_predictions(path: Path, task: str) -> dict[int, np.ndarray]:
    try:
        data = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise UsageError(
            f"{path}: missing (the shard's directory must hold what `trtverify run --shard` wrote)"
        ) from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: not a shard predictions file ({exc})") from exc
    with data:
        if str(data["task"]) != task:
            raise UsageError(f"{path}: predictions of a {data['task']} run, the suite's e2e task is {task}")
        index = data["index"]
        if task == "classification":
            scores = data["scores"]
            return {int(i): scores[k] for k, i in enumerate(index)}
        offsets, dets = data["offsets"], data["dets"]
        return {int(i): dets[offsets[k] : offsets[k + 1]] for k, i in enumerate(index)}


def check_shards(results: Sequence[tuple[Path, dict[str, Any]]]) -> int:
    """Every shard of one run of one suite, each once; returns N."""
    if not results:
        raise UsageError("merge: no shard directories given")
    first_dir, first = results[0]
    seen: dict[int, Path] = {}
    count = None
    for d, r in results:
        info = r.get("shard")
        if not info:
            raise UsageError(f"{d / 'results.json'}: not a shard (run with --shard I/N)")
        if r["suite"]["sha256"] != first["suite"]["sha256"]:
            raise UsageError(
                f"{d}: ran a different suite file than {first_dir} (sha256 {r['suite']['sha256'][:12]} vs {first['suite']['sha256'][:12]})"
            )
        if count is None:
            count = info["count"]
        elif info["count"] != count:
            raise UsageError(f"{d}: shard {info['index']}/{info['count']}, but {first_dir} is one of {count}")
        if info["index"] in seen:
            raise UsageError(f"{d}: shard {info['index']}/{count} given twice (also {seen[info['index']]})")
        if not r.get("complete"):
            raise UsageError(
                f"{d}: shard {info['index']}/{count} did not finish (results.json is incomplete); run it again"
            )
        seen[info["index"]] = d
    assert count is not None
    missing = sorted(set(range(1, count + 1)) - set(seen))
    if missing:
        raise UsageError(
            f"merge: shard(s) {', '.join(f'{i}/{count}' for i in missing)} missing; give every shard's directory"
        )
    return count


def add_timings(into: dict[str, float], timings: dict[str, float]) -> None:
    """Sum one shard's stage timings into `into`, key by key."""
    for k, v in timings.items():
        into[k] = into.get(k, 0.0) + v


def _combine_layerwise(parts: list[dict[str, Any]], order: list[str]) -> dict[str, Any]:
    """The layerwise stages of several shards (disjoint candidates) as one stage."""
    merged: dict[str, Any] = {
        k: v for k, v in parts[0].items() if k not in ("checks", "notes", "timings", "candidates", "duration_s")
    }
    cands = [c for p in parts for c in p.get("candidates", [])]
    rank = {n: i for i, n in enumerate(order)}
    merged["candidates"] = sorted(cands, key=lambda c: rank.get(c["name"], len(rank)))
    # checks in the unsharded run's order: by candidate ("<candidate>: ..."), then as each shard wrote them
    checks = [c for p in parts for c in p.get("checks", [])]
    merged["checks"] = sorted(checks, key=lambda c: rank.get(c["name"].split(": ", 1)[0], -1))
    merged["notes"] = list(dict.fromkeys(n for p in parts for n in p.get("notes", [])))
    merged["timings"] = {}
    for p in parts:
        add_timings(merged["timings"], p.get("timings", {}))
    merged["duration_s"] = sum(p.get("duration_s", 0.0) for p in parts)
    merged["status"] = "passed" if merged["checks"] and all(c["passed"] for c in merged["checks"]) else "failed"
    return merged


def merge_runs(dirs: Sequence[Path], suite_path: Path | None = None) -> dict[str, Any]:
    """One results.json from the directories of every shard of a run."""
    import json

    from trtverify import RESULTS_SCHEMA_VERSION, __version__
    from trtverify.runner import exit_code_from_stages, stage_passed
    from trtverify.stages import STAGES

    shards: list[tuple[Path, dict[str, Any]]] = []
    for d in dirs:
        d = Path(d)
        path = d / "results.json"
        try:
            shards.append((d, json.loads(path.read_text(encoding="utf-8"))))
        except FileNotFoundError:
            raise UsageError(f"{path}: not found (give the --out directories of `trtverify run --shard`)") from None
        except ValueError as exc:
            raise UsageError(f"{path}: not valid JSON ({exc})") from exc
    count = check_shards(shards)
    shards.sort(key=lambda s: s[1]["shard"]["index"])
    first = shards[0][1]
    loaded = None

    def suite() -> Any:
        nonlocal loaded
        if loaded is None:
            from trtverify.config import load_suite
            from trtverify.fsutil import sha256_file

            path = Path(suite_path or first["suite"]["path"])
            if not path.is_file():
                raise UsageError(
                    f"merge: the suite file {path} is not here; pass --suite PATH (the same file the shards ran)"
                )
            if sha256_file(path) != first["suite"]["sha256"]:
                raise UsageError(
                    f"merge: {path} differs from the suite file the shards ran (sha256 {first['suite']['sha256'][:12]})"
                )
            loaded = load_suite(path)
        return loaded

    stages: list[dict[str, Any]] = []
    names = [n for n in STAGES if any(s["name"] == n for _, r in shards for s in r["stages"])]
    for name in names:
        ran = [(d, s) for d, r in shards for s in r["stages"] if s["name"] == name and not s.get("sharded_away")]
        errors = [(d, s) for d, s in ran if s["status"] == "error"]
        if not ran:
            stages.append(
                {"name": name, "status": "skipped", "checks": [], "notes": ["no shard ran this stage"], "error": None}
            )
        elif errors:
            d, s = errors[0]
            stages.append({**s, "notes": [f"shard directory {d}: this stage failed to run there", *s.get("notes", [])]})
        elif name == "layerwise":
            cfg = suite().suite.stages.layerwise
            order = suite().suite.candidates_of(cfg) if cfg is not None else list(suite().suite.models.candidates)
            stages.append(_combine_layerwise([s for _, s in ran], order))
        elif name == "e2e":
            from trtverify.stages.e2e import merge_shards

            res = merge_shards(suite(), ran)
            res.duration_s = sum(s.get("duration_s", 0.0) for _, s in ran)
            stages.append(res.to_dict())
        else:
            stages.append(ran[0][1])
    done = all(r.get("complete") for _, r in shards)
    return {
        "schema_version": RESULTS_SCHEMA_VERSION,
        "trtverify_version": __version__,
        "suite": first["suite"],
        "started": min(r["started"] for _, r in shards),
        "duration_s": max(r["duration_s"] for _, r in shards),
        "complete": done,
        "passed": bool(stages) and done and all(stage_passed(s) for s in stages),
        "exit_code": exit_code_from_stages(stages),
        "stages": stages,
        "environment": first["environment"],
        "merged": {"shards": count, "dirs": [str(d) for d, _ in shards]},
    }
