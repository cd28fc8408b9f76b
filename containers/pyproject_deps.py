"""Print the package's dependencies for some extras, one per line, from ``pyproject.toml`` alone.

The images install these in a layer of their own before copying the sources, so a code change
rebuilds only the small layer that installs the package itself (``pip install --no-deps .``).
Extras that name the package itself (``tfrecord-suite[gcs]``) are expanded in place.

usage: python3 pyproject_deps.py PYPROJECT [EXTRA ...] > requirements.txt
"""

from __future__ import annotations

import re
import sys
import tomllib


def dependencies(pyproject: dict, extras: list[str]) -> list[str]:
    """The base dependencies plus those of ``extras``, self-references expanded, in order."""
    project = pyproject["project"]
    name = project["name"]
    optional = project.get("optional-dependencies", {})
    self_ref = re.compile(rf"^{re.escape(name)}\[([^\]]+)\]$")
    out: list[str] = []
    seen: set[str] = set()

    def add(requirements: list[str]) -> None:
        for requirement in requirements:
            m = self_ref.match(requirement.replace(" ", ""))
            if m:
                for extra in m[1].split(","):
                    if extra not in seen:
                        seen.add(extra)
                        add(optional[extra])
            elif requirement not in out:
                out.append(requirement)

    add(project.get("dependencies", []))
    for extra in extras:
        if extra not in optional:
            raise SystemExit(f"no extra {extra!r} in {name}; extras: {', '.join(optional)}")
        seen.add(extra)
        add(optional[extra])
    return out


if __name__ == "__main__":
    with open(sys.argv[1], "rb") as fh:
        print("\n".join(dependencies(tomllib.load(fh), sys.argv[2:])))
