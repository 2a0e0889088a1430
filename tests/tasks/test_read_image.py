"""Image files become the same uint8 RGB pixels whichever decoder reads them: plain 8-bit PNGs go
through libspng (pyspng) where it is installed, everything else and every damaged file through PIL,
whose `convert("RGB")` is the definition. Real files, encoded by PIL, decoded by both."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from trtverify.errors import UsageError
from trtverify.tasks import datasets
from trtverify.tasks.datasets import _plain_png, _read_image

REPO = Path(__file__).resolve().parents[2]
RNG = np.random.default_rng(7)
PIXELS = RNG.integers(0, 256, (33, 47, 4), dtype=np.uint8)


def _png(im: Image.Image, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format="PNG", **kw)
    return buf.getvalue()


def _pil_rgb(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGB"))


gray = Image.fromarray(PIXELS[..., 0])
# name -> (PNG bytes, whether the fast decoder takes it)
CASES = {
    "rgb": (_png(Image.fromarray(PIXELS[..., :3])), True),
    "rgba": (_png(Image.fromarray(PIXELS)), True),
    "gray": (_png(gray), True),
    "gray+alpha": (_png(Image.merge("LA", [gray, Image.fromarray(PIXELS[..., 1])])), True),
    "palette 8-bit": (_png(Image.fromarray(PIXELS[..., :3]).quantize(200)), True),
    "palette with transparency": (_png(Image.fromarray(PIXELS[..., :3]).quantize(200), transparency=3), True),
    "gray with transparency": (_png(gray, transparency=7), True),
    "rgb with transparency": (_png(Image.fromarray(PIXELS[..., :3]), transparency=(1, 2, 3)), True),
    "rgb, level-0 compression": (_png(Image.fromarray(PIXELS[..., :3]), compress_level=0), True),
    "palette 4-bit": (_png(Image.fromarray(PIXELS[..., :3]).quantize(12)), False),
    "1-bit": (_png(Image.fromarray(PIXELS[..., 0] > 128)), False),
    "16-bit gray": (_png(Image.fromarray(PIXELS[..., 0].astype(np.uint16) * 257)), False),
}


def _counting(monkeypatch) -> list[int]:
    """Spy on the fast decoder (the real one is called): how many images it decoded."""
    spng = pytest.importorskip("pyspng")
    calls = []
    real = spng.load

    def load(data, format=None):
        calls.append(1)
        return real(data, format=format)

    monkeypatch.setattr(datasets, "_SPNG", type("M", (), {"load": staticmethod(load)}))
    return calls


@pytest.mark.parametrize("name", list(CASES))
def test_same_pixels_as_pil(name: str, tmp_path: Path, monkeypatch):
    data, fast = CASES[name]
    calls = _counting(monkeypatch)
    path = tmp_path / "img.png"
    path.write_bytes(data)
    got = _read_image(path)
    want = _pil_rgb(data)
    assert got.dtype == np.uint8 and got.shape == want.shape == (33, 47, 3)
    assert np.array_equal(got, want)
    assert len(calls) == int(fast), f"{name}: the fast decoder {'should' if fast else 'should not'} have read it"


def test_without_pyspng_pil_reads_everything(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(datasets, "_SPNG", False)  # as on a platform without a pyspng wheel
    for name, (data, _) in CASES.items():
        path = tmp_path / "img.png"
        path.write_bytes(data)
        assert np.array_equal(_read_image(path), _pil_rgb(data)), name


def test_demo_validation_images_decode_identically(monkeypatch):
    calls = _counting(monkeypatch)
    files = sorted((REPO / "demo" / "shapes" / "val" / "images").glob("*.png"))
    assert len(files) == 200
    for f in files:
        assert np.array_equal(_read_image(f), _pil_rgb(f.read_bytes())), f.name
    assert len(calls) == 200


def _chunk(data: bytes, kind: bytes) -> tuple[int, int]:
    """(offset of the chunk's data, its length)."""
    i = data.index(kind)
    return i + 4, struct.unpack(">I", data[i - 4 : i])[0]


def test_damaged_files_are_refused_as_pil_refuses_them(tmp_path: Path, monkeypatch):
    """pyspng decodes with CRC checks off: a flipped byte inside the image data would come out as
    wrong pixels without an error. The CRC check sends it to PIL, which refuses it."""
    calls = _counting(monkeypatch)
    data = CASES["rgb"][0]
    start, length = _chunk(data, b"IDAT")
    flipped = bytearray(data)
    flipped[start + length // 2] ^= 0xFF
    path = tmp_path / "bad.png"
    for broken in (bytes(flipped), data[:-30], data[: start + 10]):
        path.write_bytes(broken)
        assert not _plain_png(broken)
        with pytest.raises(UsageError, match=r"bad\.png: cannot read image"):
            _read_image(path)
    assert not calls


def test_wrong_crc_on_intact_data_reads_as_pil_reads_it(tmp_path: Path):
    data = bytearray(CASES["rgb"][0])
    start, length = _chunk(bytes(data), b"IDAT")
    data[start + length] ^= 0xFF  # the CRC, not the data
    path = tmp_path / "crc.png"
    path.write_bytes(bytes(data))
    assert not _plain_png(bytes(data))
    assert np.array_equal(_read_image(path), PIXELS[..., :3])  # PIL does not check IDAT CRCs


def test_interlaced_and_oversized_pngs_go_to_pil():
    data = bytearray(CASES["rgb"][0])
    data[28] = 1  # IHDR interlace method: Adam7
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    assert not _plain_png(bytes(data))
    big = bytearray(CASES["rgb"][0])
    big[16:24] = struct.pack(">II", 100_000, 100_000)  # PIL's decompression-bomb limit applies
    big[29:33] = struct.pack(">I", zlib.crc32(bytes(big[12:29])))
    assert not _plain_png(bytes(big))
    assert _plain_png(bytes(CASES["rgb"][0]))


def test_missing_file_names_it(tmp_path: Path):
    with pytest.raises(UsageError, match=r"nope\.png: cannot read image \(No such file or directory\)"):
        _read_image(tmp_path / "nope.png")
