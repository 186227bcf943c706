"""The edits a copy detector must see through, with random parameters per edit
(``bench/copy_detection.py``; ``tests/verification/test_copies.py`` uses the same kinds
with fixed parameters). Each takes a PIL RGB image and a numpy Generator and returns
(edited image, JPEG quality to save it with, a short description of the parameters)."""

import numpy as np

EDITS = ("jpeg", "resize", "crop", "border", "caption", "tone", "rotate", "mirror", "upscale")


def _pil():
    from PIL import Image, ImageDraw, ImageEnhance, ImageFont
    return Image, ImageDraw, ImageEnhance, ImageFont


def jpeg(img, rng):
    q = int(rng.integers(10, 31))  # heavy re-encoding: quality 10-30
    return img, q, f"q{q}"


def resize(img, rng):
    Image = _pil()[0]
    side = int(rng.integers(400, 641))  # down to 400 px on the longer side
    k = side / max(img.size)
    return img.resize((max(1, round(img.width * k)), max(1, round(img.height * k))), Image.LANCZOS), 90, f"{side}px"


def crop(img, rng):
    area = float(rng.uniform(0.5, 0.9))  # keep 50-90 % of the area, aspect changed by up to 1.3x
    aspect = float(np.exp(rng.uniform(-np.log(1.3), np.log(1.3))))
    w = min(img.width, round(img.width * np.sqrt(area) * np.sqrt(aspect)))
    h = min(img.height, round(img.width * img.height * area / max(w, 1)))
    x = int(rng.integers(0, img.width - w + 1))
    y = int(rng.integers(0, img.height - h + 1))
    return img.crop((x, y, x + w, y + h)), 90, f"{100 * w * h / (img.width * img.height):.0f}%"


def border(img, rng):
    Image = _pil()[0]
    colour = tuple(int(c) for c in rng.integers(0, 256, 3)) if rng.random() < 0.5 else (0, 0, 0)
    if rng.random() < 0.5:  # letterbox to a 1:1 or 16:9 frame
        side = max(img.size)
        W, H = (side, side) if rng.random() < 0.5 else (max(img.width, round(img.height * 16 / 9)), img.height)
        if W == img.width and H == img.height:
            W = img.width + 2 * int(0.1 * img.width)
        what = "letterbox"
    else:  # a frame of 3-15 % a side
        f = float(rng.uniform(0.03, 0.15))
        W, H = img.width + 2 * round(f * img.width), img.height + 2 * round(f * img.height)
        what = f"frame {100 * f:.0f}%"
    out = Image.new("RGB", (W, H), colour)
    out.paste(img, ((W - img.width) // 2, (H - img.height) // 2))
    return out, 90, what


def caption(img, rng):
    _, ImageDraw, _, ImageFont = _pil()
    out = img.copy()
    d = ImageDraw.Draw(out, "RGBA")
    h = int(img.height * rng.uniform(0.08, 0.18))
    try:
        font = ImageFont.load_default(size=max(10, int(h * 0.6)))
    except TypeError:  # Pillow < 10.1
        font = ImageFont.load_default()
    text = "".join(rng.choice(list("ABCDEFGHIJKLMNOPQRSTUVWXYZ abcdefghij 0123456789"), 24))
    if rng.random() < 0.5:  # an opaque caption band at the top or bottom
        y0 = 0 if rng.random() < 0.5 else img.height - h
        d.rectangle((0, y0, img.width, y0 + h), fill=(0, 0, 0, 255))
        d.text((int(0.03 * img.width), y0 + h // 5), text, fill=(255, 255, 255, 255), font=font)
        return out, 90, f"band {100 * h / img.height:.0f}%"
    x = int(rng.uniform(0.02, 0.3) * img.width)  # a semi-transparent watermark across the image
    y = int(rng.uniform(0.3, 0.7) * img.height)
    d.text((x, y), text, fill=(255, 255, 255, 110), font=font)
    return out, 90, "watermark"


def tone(img, rng):
    _, _, ImageEnhance, _ = _pil()
    gamma = float(np.exp(rng.uniform(np.log(0.6), np.log(1.6))))
    a = np.asarray(img, np.float32) / 255.0
    a = a ** gamma
    gains = rng.uniform(0.8, 1.2, 3).astype(np.float32)  # a colour cast
    a = np.clip(a * gains, 0, 1)
    out = _pil()[0].fromarray((a * 255 + 0.5).astype(np.uint8))
    contrast = float(rng.uniform(0.7, 1.3))
    sat = float(rng.uniform(0.0, 1.5))  # 0: black and white
    out = ImageEnhance.Color(ImageEnhance.Contrast(out).enhance(contrast)).enhance(sat)
    return out, 90, f"gamma {gamma:.2f} contrast {contrast:.2f} sat {sat:.2f}"


def rotate(img, rng):
    Image = _pil()[0]
    turns = int(rng.integers(1, 4))
    return img.transpose((Image.ROTATE_90, Image.ROTATE_180, Image.ROTATE_270)[turns - 1]), 90, f"{90 * turns} deg"


def mirror(img, rng):
    Image = _pil()[0]
    return img.transpose(Image.FLIP_LEFT_RIGHT), 90, "left-right"


def upscale(img, rng):
    """Upscaled by 1.05-1.25x (Lanczos), half the time after a crop to 60-90 % of the area: an
    upscaled crop shows the common region at more pixels than its source, as a zoomed re-capture does."""
    Image = _pil()[0]
    what = ""
    if rng.random() < 0.5:
        side = float(np.sqrt(rng.uniform(0.6, 0.9)))
        w, h = round(img.width * side), round(img.height * side)
        x, y = int(rng.integers(0, img.width - w + 1)), int(rng.integers(0, img.height - h + 1))
        img, what = img.crop((x, y, x + w, y + h)), f"crop {100 * side * side:.0f}%, "
    k = float(rng.uniform(1.05, 1.25))
    return img.resize((round(img.width * k), round(img.height * k)), Image.LANCZOS), 90, f"{what}x{k:.2f}"


# Two edits at once (``bench/copy_detection.py --combined``), edits the single kinds do not draw: each
# as its kinds apply it, in order, then saved at quality 40-80 (a re-post) unless one of them is the
# heavy re-encoding.
COMBINED = ("resize+jpeg", "crop+resize", "border+caption", "tone+jpeg", "crop+tone", "caption+resize",
            "rotate+resize")


def apply(kind, img, rng):
    if "+" in kind:
        whats, quality = [], 90
        for part in kind.split("+"):
            img, q, what = apply(part, img, rng)
            quality = min(quality, q)
            whats.append(what)
        if "jpeg" not in kind.split("+"):
            quality = int(rng.integers(40, 81))
            whats.append(f"q{quality}")
        return img, quality, ", ".join(whats)
    return {"jpeg": jpeg, "resize": resize, "crop": crop, "border": border, "caption": caption, "tone": tone,
            "rotate": rotate, "mirror": mirror, "upscale": upscale}[kind](img, rng)
