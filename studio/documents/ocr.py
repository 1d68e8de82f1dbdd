"""Scanned PDF pages to text with RapidOCR: the optional ``ocr`` extra.

Why RapidOCR (``rapidocr-onnxruntime``): its detection and recognition models (PP-OCRv4, ONNX)
ship inside the wheel and run on onnxruntime, which the project already has, so nothing is
downloaded at run time (it works offline) and no system Tesseract is needed. Without the extra
``ocr_available()`` is False and the PDF converter behaves as before. One engine per process,
made on first use; its calls are serialised (its detector keeps per-call state, and onnxruntime
already spreads one page over every core).

Measured on scans of 11 pt Helvetica A4 pages (bench/CONVERTER-RESULTS.md): 200 dpi, read at
full size, finds 96% of their words; on one page 150 dpi ran words together (30%), and so did
RapidOCR's default of shrinking a page to 2,000 px (79%). Its line-orientation classifier is
off: it turned upright lines upside down (6 of 40 lines garbled on one page), and scans are
read upright.
"""

from __future__ import annotations

import threading
from typing import Any

OCR_EXTRA = "ocr"
OCR_DPI = 200
MAX_SIDE_PX = 4000  # a page larger than A3 at 200 dpi is rendered smaller, to this many pixels

_lock = threading.Lock()
_engine: Any = None


def ocr_available() -> bool:
    """Whether the ``ocr`` extra is installed (and its OpenCV loads)."""
    try:
        import rapidocr_onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def page_text(page: Any) -> str:
    """The text RapidOCR reads on a pypdfium2 page, lines in reading order ("" if none)."""
    global _engine
    scale = min(OCR_DPI / 72, MAX_SIDE_PX / max(page.get_size()))  # sizes in points
    image = page.render(scale=scale, grayscale=True).to_pil()
    with _lock:
        if _engine is None:
            from rapidocr_onnxruntime import RapidOCR

            _engine = RapidOCR(
                use_cls=False,
                max_side_len=MAX_SIDE_PX,
                det_limit_type="max",  # lines are found on a page shrunk to 1,280 px and
                det_limit_side_len=1280,  # read at full size: a third less time, same words
            )
        found, _ = _engine(image)
    return _reading_order(found or [])


def release_engine() -> None:
    """Drop the engine (its models and buffers, 0.5 GB and more after a few pages): ingest
    converts every file before it embeds, so the models are not held beside the encoder."""
    global _engine
    with _lock:
        _engine = None


def _reading_order(found: list) -> str:
    """Boxes top to bottom; boxes whose tops are within half a line of a row's first box are
    that row, read left to right."""
    boxes = []
    for corners, text, _score in found:
        xs, ys = [x for x, _ in corners], [y for _, y in corners]
        boxes.append((min(ys), max(ys) - min(ys), min(xs), text))
    rows: list[tuple[float, list[tuple[float, str]]]] = []
    for top, height, left, text in sorted(boxes):
        if rows and top - rows[-1][0] < height / 2:
            rows[-1][1].append((left, text))
        else:
            rows.append((top, [(left, text)]))
    return "\n".join(" ".join(text for _, text in sorted(row)) for _, row in rows)
