"""Files generated from the source and committed: written, or checked against the source.

``components/`` (kfp.catalog) and ``k8s/data-service/`` (launch.data_service) are made so.
"""

from __future__ import annotations

import os


def write_generated(files: dict[str, str], check: bool = False) -> list[str]:
    """Write each ``path -> text`` that differs (with ``check``, write nothing).

    Returns:
        The paths whose content differed (written, unless ``check``).

    """
    stale = []
    for path, text in files.items():
        current = None
        if os.path.exists(path):
            with open(path) as fh:
                current = fh.read()
        if current != text:
            stale.append(path)
            if not check:
                os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
                with open(path, "w") as fh:
                    fh.write(text)
    return stale
