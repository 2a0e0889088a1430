"""Input hook of suites/shapes_segmentation.yaml: real validation images as the tensor stages' samples.

`val_images(count, batch)` yields feeds {"images": float32 [batch, 3, 128, 128] in [0, 1]} made from
the first `count` images of val/images (the model's preprocessing: RGB / 255, NCHW).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
from PIL import Image

VAL = Path(__file__).resolve().parent / "val" / "images"


def val_images(count: int = 8, batch: int = 4) -> Iterator[dict[str, np.ndarray]]:
    files = sorted(VAL.glob("*.png"))[:count]
    for lo in range(0, len(files), batch):
        images = [np.asarray(Image.open(f).convert("RGB"), np.float32) / 255.0 for f in files[lo : lo + batch]]
        yield {"images": np.stack(images).transpose(0, 3, 1, 2).copy()}
