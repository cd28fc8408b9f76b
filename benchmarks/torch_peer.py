"""The PyTorch peer: the PyPI ``tfrecord`` reader in a DataLoader with 2 workers.

Run as its own process by :func:`benchmarks.read._torch_variant` (its copy of the
``tensorflow.Example`` proto clashes with TensorFlow's, and a PyTorch user would not have
TensorFlow loaded). Argument: JSON ``[files, description, batch_size, take]``. Prints JSON
``[items, items after the first batch, seconds after the first batch, seconds in all]``.
"""

import json
import sys
import time

import numpy as np
import torch
from tfrecord.reader import tfrecord_loader


class Shards(torch.utils.data.IterableDataset):
    """The shards, split between the DataLoader's workers by position."""

    def __init__(self, files: list[str], description: dict[str, str]) -> None:
        self.files = files
        self.description = description

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        mine = self.files if info is None else self.files[info.id :: info.num_workers]
        for path in mine:
            yield from tfrecord_loader(path, None, self.description)


def collate(rows: list[dict]) -> dict:
    """Stack numeric features into tensors; keep bytes (and uint8 arrays) as lists."""
    out = {}
    for k, v in rows[0].items():
        raw = isinstance(v, bytes) or v.dtype == np.uint8
        out[k] = [r[k] for r in rows] if raw else torch.from_numpy(np.stack([r[k] for r in rows]))
    return out


def main(argv: list[str]) -> None:
    """Drain ``take`` batches (all with 0) and print the counts and times."""
    files, description, batch_size, take = json.loads(argv[1])
    loader = torch.utils.data.DataLoader(
        Shards(files, description), batch_size=batch_size, num_workers=2, collate_fn=collate
    )
    t = time.perf_counter()
    n = first = 0
    first_at = t
    for i, batch in enumerate(loader):
        n += len(next(iter(batch.values())))  # rows in the batch, whatever the features
        if i == 0:
            first, first_at = n, time.perf_counter()
        if take and i + 1 >= take:
            break
    end = time.perf_counter()
    print(json.dumps([n, n - first, end - first_at, end - t]))


if __name__ == "__main__":
    main(sys.argv)
