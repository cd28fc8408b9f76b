"""Small real public datasets for the demo and the end-to-end tests, written as raw files.

* ``digits``: scikit-learn's copy of the UCI handwritten digits (1,797 8x8 grayscale images, 10
  classes; BSD-3-Clause via scikit-learn, data CC BY 4.0 from the UCI repository), written as a
  folder of PNG files per class: ``<root>/<digit>/<index>.png``.
* ``penguins``: the Palmer penguins table (344 rows, species label, categorical island and sex,
  real missing values; CC0), copied from the ``palmerpenguins`` package as a CSV file.
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
