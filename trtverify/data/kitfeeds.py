"""The capture kit's consistency feeds (docs/captured.md#captures-against-each-other-and-consistency): fed after the
kit's own feeds by the same capture commands, so a capture holds them as further iterations, and the layerwise stage
checks the engine against itself with them.

- `repeat`: feed 0 again; its iteration must equal feed 0's bit for bit (determinism);
- `duplicated_row`: a batch holding row 0 of feed 0 twice (feed 0 with row 1 replaced by row 0 where its batch has
  2 rows or more; else rows [0, 0] where the batch axis is dynamic); the two rows' outputs must be identical;
- `repeated_batch`: row 0 of feed 0 repeated N times (N: the model's batch where it is fixed, else 4); each row's
  outputs must equal row 0 of feed 0's within the tolerance of a batch-size tactic change.

Where one cannot be made (a batch fixed at 1, an input without a batch axis), the reason is returned instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DYNAMIC_REPEATS = 4  # rows of the repeated batch where the batch axis is dynamic
ROLES = ("repeat", "duplicated_row", "repeated_batch")


@dataclass(frozen=True)
class ConsistencyFeed:
    role: str
    feed: dict[str, np.ndarray]
    rows: int  # rows of its batch (0: no batch axis)
    duplicated: tuple[int, ...] = ()  # duplicated_row: the rows holding row 0 of feed 0

    def manifest(self, iteration: int, digest: str) -> dict[str, object]:
        entry: dict[str, object] = {"role": self.role, "iteration": iteration, "of_feed": 0, "rows": self.rows,
                                    "digest": digest}  # fmt: skip
        if self.duplicated:
            entry["duplicated_rows"] = list(self.duplicated)
        entry["shapes"] = {n: list(a.shape) for n, a in self.feed.items()}
        return entry


def _fixed(d: object) -> bool:
    return isinstance(d, int) and d > 0


def consistency_feeds(
    feed0: dict[str, np.ndarray],
    declared: dict[str, tuple[object, ...] | None],
    outputs: Sequence[tuple[object, ...] | None] = (),
) -> tuple[list[ConsistencyFeed], dict[str, str]]:
    """The consistency feeds made from the kit's first feed, and why the others could not be made.
    `declared`: each input's declared shape (None: unknown rank); `outputs`: the graph outputs' declared shapes. The
    batch axis is the inputs' first axis where it is dynamic, or fixed at a size every graph output's first axis
    declares too (a fixed first axis that no output shares, as torchvision's detectors' [3, H, W] image, is not one)."""
    made = [ConsistencyFeed("repeat", {n: a.copy() for n, a in feed0.items()}, 0)]
    not_possible: dict[str, str] = {}
    no_axis = [n for n, a in feed0.items() if declared.get(n) is None or len(declared[n] or ()) != a.ndim or not a.ndim]
    if no_axis:
        why = f"input {', '.join(repr(n) for n in no_axis)} has no batch axis (its rank is not the model's)"
        return made, {"duplicated_row": why, "repeated_batch": why}
    batches = {a.shape[0] for a in feed0.values()}
    if len(batches) > 1:
        why = f"the inputs' first axes differ ({sorted(batches)}): no common batch axis"
        return made, {"duplicated_row": why, "repeated_batch": why}
    batch = batches.pop()
    fixed_first = [n for n in feed0 if _fixed((declared[n] or (None,))[0])]
    if fixed_first and not (outputs and all(o and o[0] == batch for o in outputs)):
        why = (f"input {', '.join(repr(n) for n in fixed_first)} has a fixed first axis of {batch} that the graph "
               "outputs do not share: not a batch axis")  # fmt: skip
        return made, {"duplicated_row": why, "repeated_batch": why}
    made[0] = ConsistencyFeed("repeat", made[0].feed, batch)
    dynamic = any(not _fixed((declared[n] or (None,))[0]) for n in feed0)
    if batch >= 2:
        dup = {n: a.copy() for n, a in feed0.items()}
        for a in dup.values():
            a[1] = a[0]
        made.append(ConsistencyFeed("duplicated_row", dup, batch, (0, 1)))
    elif dynamic:
        made.append(ConsistencyFeed("duplicated_row", {n: np.repeat(a[:1], 2, axis=0) for n, a in feed0.items()}, 2,
                                    (0, 1)))  # fmt: skip
    else:
        not_possible["duplicated_row"] = "the model's batch is fixed at 1: a batch cannot hold a row twice"
    repeats = DYNAMIC_REPEATS if dynamic else batch
    if repeats >= 2:
        made.append(ConsistencyFeed("repeated_batch", {n: np.repeat(a[:1], repeats, axis=0) for n, a in feed0.items()},
                                    repeats))  # fmt: skip
    else:
        not_possible["repeated_batch"] = (
            "the model's batch is fixed at 1: a batch of one row repeated is feed 0 itself (the repeat feed checks "
            "determinism)"
        )
    return made, not_possible


__all__ = ["DYNAMIC_REPEATS", "ROLES", "ConsistencyFeed", "consistency_feeds"]
