"""Small real public datasets for the demo and the end-to-end tests, written as raw files.

* ``digits``: scikit-learn's copy of the UCI handwritten digits (1,797 8x8 grayscale images, 10
  classes; BSD-3-Clause via scikit-learn, data CC BY 4.0 from the UCI repository), written as a
  folder of PNG files per class: ``<root>/<digit>/<index>.png``.
* ``penguins``: the Palmer penguins table (344 rows, species label, categorical island and sex,
  real missing values; CC0), copied from the ``palmerpenguins`` package as a CSV file.
* ``photos``: scikit-learn's two sample photographs (``china.jpg`` and ``flower.jpg``, 427x640;
  CC BY 2.0, from Flickr, attributions in scikit-learn's ``datasets/images/README.txt``) cut into
  many JPEG files by seeded random crops, flips and scales, one class per photo:
  ``<root>/<china|flower>/<index>.jpg``.
"""

from __future__ import annotations

import os
import shutil
from importlib import resources


def write_digits(root: str, limit: int | None = None) -> str:
    """Write the digits dataset as PNG images under ``root/<class>/`` and return ``root``."""
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = digits.images if limit is None else digits.images[:limit]
    for i, (pixels, target) in enumerate(zip(images, digits.target, strict=False)):
        folder = os.path.join(root, str(int(target)))
        os.makedirs(folder, exist_ok=True)
        # the source pixels are 0..16; scale to the 0..255 range image files use
        img = Image.fromarray(np.round(pixels * (255.0 / 16.0)).astype("uint8"), mode="L")
        img.save(os.path.join(folder, f"{i:04d}.png"), optimize=False)
    return root


def write_penguins(path: str) -> str:
    """Copy the Palmer penguins CSV to ``path`` and return it."""
    source = resources.files("palmerpenguins").joinpath("data", "penguins.csv")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with resources.as_file(source) as src:
        shutil.copyfile(src, path)
    return path


def write_photos(
    root: str,
    per_class: int,
    size: tuple[int, int],
    seed: int = 0,
    quality: int = 90,
) -> str:
    """Write ``per_class`` JPEGs of ``size`` (height, width) per sample photo; return ``root``.

    Each is a random window of its photo (10-100 % of its area, aspect ratio 3/4-4/3, the
    random-resized-crop of ImageNet training), flipped at random, resized to ``size`` (larger
    sizes upscale the 427x640 photo) and saved at JPEG ``quality`` with 4:2:0 chroma, as cameras
    and most datasets store photos. Seeded: the same arguments write the same files.
    """
    import math
    import random

    from PIL import Image
    from sklearn.datasets import load_sample_images

    rng = random.Random(seed)
    sample = load_sample_images()
    for path, pixels in zip(sample.filenames, sample.images, strict=True):
        name = os.path.splitext(os.path.basename(path))[0]
        folder = os.path.join(root, name)
        os.makedirs(folder, exist_ok=True)
        photo = Image.fromarray(pixels)
        width, height = photo.size
        for i in range(per_class):
            area = width * height * rng.uniform(0.1, 1.0)
            aspect = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
            w = min(width, round(math.sqrt(area * aspect)))
            h = min(height, round(math.sqrt(area / aspect)))
            x, y = rng.randint(0, width - w), rng.randint(0, height - h)
            img = photo.crop((x, y, x + w, y + h))
            if rng.random() < 0.5:
                img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
            img = img.resize((size[1], size[0]), Image.Resampling.BILINEAR)
            img.save(os.path.join(folder, f"{i:05d}.jpg"), quality=quality, subsampling=2)
    return root
