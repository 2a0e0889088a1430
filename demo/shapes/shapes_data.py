"""Deterministic generator of a tiny multi-class detection data set ("shapes").

Each image is 128x128 RGB: a mildly textured, slightly noisy background with
1-4 filled shapes (circle, square, triangle) of random size (12-48 px), colour
and position, placed so that their boxes do not overlap. Boxes are exactly
tight around the drawn pixels: each shape is first drawn into its own mask
and the box is taken from that mask.

Box convention: (x1, y1, x2, y2) in pixel-edge coordinates, i.e. a shape whose
leftmost drawn pixel column is c has x1 = c and one whose rightmost drawn column
is c has x2 = c + 1 (so w = x2 - x1 is the number of pixel columns covered).
COCO bboxes are [x1, y1, x2 - x1, y2 - y1].

Classes (COCO category ids): 1 = circle, 2 = square, 3 = triangle.

`make_sample` additionally returns the per-pixel class map (uint8, 0 = background,
else the class id of the shape painted there); `make_image` returns its first two items.

Only numpy and Pillow are needed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

IMAGE_SIZE = 128
MIN_SIZE, MAX_SIZE = 12, 48
MAX_SHAPES = 4
CATEGORIES = [
    {"id": 1, "name": "circle", "supercategory": "shape"},
    {"id": 2, "name": "square", "supercategory": "shape"},
    {"id": 3, "name": "triangle", "supercategory": "shape"},
]
CLASS_NAMES = {c["id"]: c["name"] for c in CATEGORIES}


def _background(rng: np.random.Generator, size: int) -> np.ndarray:
    """Float HxWx3 background: base colour + linear gradient + smooth blobs + weak noise."""
    base = rng.uniform(40, 215, size=3).astype(np.float32)
    ramp = np.linspace(-0.5, 0.5, size, dtype=np.float32)
    angle = rng.uniform(0, 2 * math.pi)
    g = np.float32(np.cos(angle)) * ramp[None, :] + np.float32(np.sin(angle)) * ramp[:, None]
    grad = g[..., None] * rng.uniform(-40, 40, size=3).astype(np.float32)
    # low-frequency texture: 8x8 random grid, bilinearly upsampled
    coarse = rng.normal(0.0, 1.0, size=(9, 9)).astype(np.float32)
    tex = np.asarray(Image.fromarray(coarse, mode="F").resize((size, size), Image.BILINEAR), dtype=np.float32)
    tex = tex[..., None] * (rng.uniform(4, 12) * (0.6 + 0.4 * rng.random(3))).astype(np.float32)
    # weak pixel noise, 2x2 blocks (keeps the PNGs small)
    noise = rng.normal(0.0, rng.uniform(1.5, 4.0), size=(size // 2, size // 2, 1)).astype(np.float32)
    noise = noise.repeat(2, axis=0).repeat(2, axis=1)
    return base + grad + tex + noise


def _shape_colour(rng: np.random.Generator, bg: np.ndarray) -> np.ndarray:
    """A random colour that differs clearly from the local background colour."""
    for _ in range(50):
        c = rng.uniform(0, 255, size=3)
        if np.linalg.norm(c - bg) > 90:
            return c
    return 255.0 - bg  # fallback: complementary colour


def _draw_mask(cls: int, cx: float, cy: float, size: float, rng: np.random.Generator, img_size: int) -> np.ndarray:
    """Boolean mask of one shape; `size` is the shape's nominal extent in px."""
    m = Image.new("L", (img_size, img_size), 0)
    d = ImageDraw.Draw(m)
    r = size / 2.0
    if cls == 1:  # circle (axis-aligned, diameter = size)
        d.ellipse([cx - r, cy - r, cx + r - 1, cy + r - 1], fill=255)
    elif cls == 2:  # square, axis-aligned or slightly rotated (|angle| <= 15 deg)
        a = rng.uniform(-15, 15) * math.pi / 180 if rng.random() < 0.5 else 0.0
        hr = r / max(abs(math.cos(a)) + abs(math.sin(a)), 1e-6)  # keep the extent ~ size
        pts = [
            (cx + hr * (math.cos(a) * sx - math.sin(a) * sy), cy + hr * (math.sin(a) * sx + math.cos(a) * sy))
            for sx, sy in ((-1, -1), (1, -1), (1, 1), (-1, 1))
        ]
        d.polygon(pts, fill=255)
    else:  # triangle: roughly equilateral, random rotation
        a0 = rng.uniform(0, 2 * math.pi)
        angles = [a0 + k * 2 * math.pi / 3 + rng.uniform(-0.15, 0.15) for k in range(3)]
        pts = [(math.cos(a), math.sin(a)) for a in angles]
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        scale = size / max(max(xs) - min(xs), max(ys) - min(ys))  # largest extent = size
        mx, my = (max(xs) + min(xs)) / 2, (max(ys) + min(ys)) / 2
        d.polygon([(cx + (x - mx) * scale, cy + (y - my) * scale) for x, y in pts], fill=255)
    return np.asarray(m, dtype=np.uint8) > 127


def _overlaps(box, boxes, margin: float = 2.0) -> bool:
    x1, y1, x2, y2 = box
    for b in boxes:
        if x1 < b[2] + margin and b[0] < x2 + margin and y1 < b[3] + margin and b[1] < y2 + margin:
            return True
    return False


def make_sample(rng: np.random.Generator, size: int = IMAGE_SIZE):
    """One image, its boxes and its per-pixel class map.

    Returns (image uint8 [size, size, 3], [(class_id, x1, y1, x2, y2), ...],
    labels uint8 [size, size]) with class ids 1..3, integer pixel-edge box
    coordinates (see module docstring) and labels = 0 for background and the
    shape's class id on exactly the pixels painted with that shape's colour.
    Consumes `rng` exactly like `make_image` (which returns the first two items).
    """
    img = _background(rng, size)
    labels = np.zeros((size, size), dtype=np.uint8)
    n = int(rng.integers(1, MAX_SHAPES + 1))
    boxes: list[tuple[int, int, int, int, int]] = []
    for _ in range(n):
        for _attempt in range(30):
            cls = int(rng.integers(1, 4))
            s = float(rng.uniform(MIN_SIZE, MAX_SIZE))
            cx = float(rng.uniform(s / 2 + 1, size - s / 2 - 1))
            cy = float(rng.uniform(s / 2 + 1, size - s / 2 - 1))
            mask = _draw_mask(cls, cx, cy, s, rng, size)
            ys, xs = np.nonzero(mask)
            if len(xs) == 0:
                continue
            box = (int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1)
            if _overlaps(box, [b[1:] for b in boxes]):
                continue
            local_bg = img[box[1] : box[3], box[0] : box[2]].reshape(-1, 3).mean(axis=0)
            colour = _shape_colour(rng, local_bg)
            # slight shading across the shape so it is not perfectly flat (2x2 blocks)
            x1, y1, x2, y2 = box
            bh, bw = (y2 - y1 + 1) // 2, (x2 - x1 + 1) // 2
            shade = rng.normal(0.0, 2.0, size=(bh, bw, 1)).astype(np.float32).repeat(2, 0).repeat(2, 1)
            m = mask[y1:y2, x1:x2]
            region = img[y1:y2, x1:x2]
            region[m] = (colour.astype(np.float32) + shade[: y2 - y1, : x2 - x1])[m]
            labels[y1:y2, x1:x2][m] = cls
            boxes.append((cls, *box))
            break
    return np.clip(np.rint(img), 0, 255).astype(np.uint8), boxes, labels


def make_image(rng: np.random.Generator, size: int = IMAGE_SIZE):
    """One image and its boxes.

    Returns (image uint8 [size, size, 3], [(class_id, x1, y1, x2, y2), ...]) with
    class ids 1..3 and integer pixel-edge box coordinates (see module docstring).
    """
    return make_sample(rng, size)[:2]


def write_coco(folder, n: int, seed: int) -> Path:
    """Write `n` images to folder/images/000001.png ... and folder/instances.json.

    Image i (1-based) is generated with np.random.default_rng([seed, i]), so every
    image is reproducible on its own. Returns the path of instances.json.
    """
    folder = Path(folder)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    images, annotations = [], []
    ann_id = 1
    for i in range(1, n + 1):
        img, boxes = make_image(np.random.default_rng([seed, i]))
        name = f"{i:06d}.png"
        Image.fromarray(img, mode="RGB").save(folder / "images" / name, optimize=True)
        images.append({"id": i, "file_name": name, "width": img.shape[1], "height": img.shape[0]})
        for cls, x1, y1, x2, y2 in boxes:
            w, h = x2 - x1, y2 - y1
            annotations.append(
                {
                    "id": ann_id,
                    "image_id": i,
                    "category_id": cls,
                    "bbox": [float(x1), float(y1), float(w), float(h)],
                    "area": float(w * h),
                    "iscrowd": 0,
                }
            )
            ann_id += 1
    doc = {
        "info": {
            "description": f"shapes detection demo, {n} generated images, seed {seed}",
            "version": "1.0",
            "contributor": "trtverify demo/shapes/make_demo.py",
        },
        "licenses": [{"id": 1, "name": "CC0-1.0", "url": "https://creativecommons.org/publicdomain/zero/1.0/"}],
        "images": images,
        "annotations": annotations,
        "categories": CATEGORIES,
    }
    path = folder / "instances.json"
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return path
