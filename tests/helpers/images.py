"""Small synthetic images: textured files for ingestion, blob images with features."""

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


def blobs(w=320, h=240, seed=0, n_blobs=60, margin=15, max_sigma=8, checkerboard=True):
    """Grey image (uint8) of dark and bright Gaussian blobs of several sizes, and a
    checkerboard patch in the top-left corner: Hessian-affine and SIFT find features."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.full((h, w), 128.0)
    for _ in range(n_blobs):
        cx, cy = rng.uniform(margin, w - margin), rng.uniform(margin, h - margin)
        s = rng.uniform(2, max_sigma)
        a = rng.choice([-1, 1]) * rng.uniform(60, 110)
        img += a * np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * s * s))
    if checkerboard:
        patch = (xx < 100) & (yy < 100)
        img[patch] += (((xx // 12 + yy // 12) % 2) * 60 - 30)[patch]
    return np.clip(img, 0, 255).astype(np.uint8)
