"""docs/stages/e2e.md, "Reference sanity": a post-processing hook that makes every model, the reference
included, predict class 3 (Dress) for every image (as tests/stages/e2e/test_e2e_sanity.py does)."""

import numpy as np


def dress(outputs):
    scores = np.zeros_like(outputs["logits"])
    scores[:, 3] = 1.0
    return scores
