"""Synthetic text images for PP-OCRv4's detector and recognizer, preprocessed as PaddleOCR does.

Used by calibration_methods.py; numpy and Pillow only, deterministic for a seed.

- Text: words of 2-9 characters (letters, digits, a few punctuation marks), drawn with Pillow's default
  font (``ImageFont.load_default(size)``, the FreeType build of Aileron bundled with Pillow >= 10.1).
- Backgrounds vary per image: a flat colour, a horizontal or vertical gradient between two colours, or a
  flat colour with Gaussian noise (sigma 4-20). Text colour is dark on light backgrounds and light on
  dark ones, with a random hue.
- Detector (``det_batch``): an RGB ``size`` x ``size`` canvas with 3-7 lines of text at random positions
  and sizes (14-40 px), some lines rotated by up to 4 degrees; normalised as PaddleOCR's DetResizeForTest
  + NormalizeImage: ``(x / 255 - mean) / std`` with mean (0.485, 0.456, 0.406) and std (0.229, 0.224,
  0.225), NCHW float32.
- Recognizer (``rec_batch``): one line of 1-4 words drawn on a tight canvas, resized to height 48 with its
  aspect ratio kept (width at most 320), normalised ``(x / 255 - 0.5) / 0.5`` and padded with zeros on the
  right to 48 x 320, as PaddleOCR's ``resize_norm_img`` does. Returns the texts too.
"""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw, ImageFont

CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
PUNCT = ".,:-/"
DET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
DET_STD = np.array([0.229, 0.224, 0.225], np.float32)
REC_H, REC_W = 48, 320


def _word(rng: np.random.Generator) -> str:
    n = int(rng.integers(2, 10))
    word = "".join(CHARS[int(i)] for i in rng.integers(0, len(CHARS), n))
    if rng.random() < 0.15:
        word += PUNCT[int(rng.integers(0, len(PUNCT)))]
    return word


def _background(rng: np.random.Generator, h: int, w: int) -> tuple[np.ndarray, bool]:
    """An RGB uint8 background and whether it is light."""
    c1 = rng.integers(0, 256, 3).astype(np.float32)
    kind = int(rng.integers(0, 3))
    if kind == 0:
        img = np.broadcast_to(c1, (h, w, 3)).copy()
    elif kind == 1:
        c2 = rng.integers(0, 256, 3).astype(np.float32)
        t = np.linspace(0, 1, w if rng.random() < 0.5 else h, dtype=np.float32)
        ramp = c1 + (c2 - c1) * t[:, None]
        img = (
            np.broadcast_to(ramp[None, :, :], (h, w, 3))
            if len(t) == w
            else np.broadcast_to(ramp[:, None, :], (h, w, 3))
        )
        img = img.copy()
    else:
        img = c1 + rng.normal(0, rng.uniform(4, 20), (h, w, 3)).astype(np.float32)
    img = np.clip(img, 0, 255).astype(np.uint8)
    return img, float(img.mean()) > 127


def _ink(rng: np.random.Generator, light: bool) -> tuple[int, int, int]:
    base = rng.integers(0, 70, 3) if light else rng.integers(185, 256, 3)
    return tuple(int(v) for v in base)


def det_image(rng: np.random.Generator, size: int) -> np.ndarray:
    """One detector image, uint8 HWC RGB."""
    bg, light = _background(rng, size, size)
    img = Image.fromarray(bg, "RGB")
    for _ in range(int(rng.integers(3, 8))):
        font = ImageFont.load_default(size=int(rng.integers(14, 41)))
        text = " ".join(_word(rng) for _ in range(int(rng.integers(1, 4))))
        layer = Image.new("L", img.size, 0)
        x, y = int(rng.integers(0, size * 2 // 3)), int(rng.integers(0, size - 20))
        ImageDraw.Draw(layer).text((x, y), text, fill=255, font=font)
        if rng.random() < 0.3:
            layer = layer.rotate(float(rng.uniform(-4, 4)), center=(x, y))
        img.paste(Image.new("RGB", img.size, _ink(rng, light)), (0, 0), layer)
    return np.asarray(img)


def det_batch(n: int, seed: int, size: int = 320) -> np.ndarray:
    """n detector inputs, float32 [n, 3, size, size], PaddleOCR's normalisation."""
    out = np.empty((n, 3, size, size), np.float32)
    for j in range(n):
        img = det_image(np.random.default_rng([seed, j]), size).astype(np.float32) / 255.0
        out[j] = ((img - DET_MEAN) / DET_STD).transpose(2, 0, 1)
    return out


def rec_image(rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """One text line, uint8 HWC RGB (height 48, width <= 320), and its text."""
    text = " ".join(_word(rng) for _ in range(int(rng.integers(1, 4))))
    font = ImageFont.load_default(size=int(rng.integers(26, 40)))
    left, top, right, bottom = font.getbbox(text)
    pad = int(rng.integers(2, 10))
    w, h = right - left + 2 * pad, bottom - top + 2 * pad
    bg, light = _background(rng, h, w)
    img = Image.fromarray(bg, "RGB")
    ImageDraw.Draw(img).text((pad - left, pad - top), text, fill=_ink(rng, light), font=font)
    new_w = min(REC_W, max(1, int(np.ceil(REC_H * w / h))))
    return np.asarray(img.resize((new_w, REC_H), Image.BILINEAR)), text


def rec_batch(n: int, seed: int) -> tuple[np.ndarray, list[str]]:
    """n recognizer inputs, float32 [n, 3, 48, 320] (right-padded with 0), and their texts."""
    out = np.zeros((n, 3, REC_H, REC_W), np.float32)
    texts = []
    for j in range(n):
        img, text = rec_image(np.random.default_rng([seed, j]))
        x = (img.astype(np.float32) / 255.0 - 0.5) / 0.5
        out[j, :, :, : x.shape[1]] = x.transpose(2, 0, 1)
        texts.append(text)
    return out, texts
