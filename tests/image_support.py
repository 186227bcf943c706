"""Small synthetic image files for the ingestion tests."""

import os

import numpy as np
from PIL import Image, ImageFilter


def textured(path, seed, size=128):
    """A blurred random texture (size x size, grey) saved at ``path``: OpenCV SIFT finds features."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 256, (size // 8, size // 8)).astype(np.uint8)
    img = Image.fromarray(a).resize((size, size), Image.Resampling.BICUBIC).filter(ImageFilter.GaussianBlur(1))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    img.save(path)
    return path
