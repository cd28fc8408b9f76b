"""``MAJOR.MINOR.PATCH`` versions, names and dataset references."""

from __future__ import annotations

import dataclasses
import re

from tfrecord_suite.errors import UserError
from tfrecord_suite.io import storage

_VERSION_RE = re.compile(r"^(0|[1-9]\d{0,8})\.(0|[1-9]\d{0,8})\.(0|[1-9]\d{0,8})$")
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
BUMPS = ("major", "minor", "patch")


class InvalidName(UserError):
    """An invalid dataset, alias or version name."""


@dataclasses.dataclass(frozen=True, order=True)
class Version:
    """A semantic version of a dataset."""

    major: int
    minor: int
    patch: int

    @classmethod
    def parse(cls, text: str) -> Version:
        """Parse ``MAJOR.MINOR.PATCH``.

        Raises:
            InvalidName: Anything else (``1.2``, ``v1.2.0``, leading zeros...).

        """
        m = _VERSION_RE.match(text or "")
        if not m:
            raise InvalidName(f"version {text!r} is not MAJOR.MINOR.PATCH (e.g. 1.2.0)")
        return cls(int(m[1]), int(m[2]), int(m[3]))

    @staticmethod
    def is_version(text: str) -> bool:
        """Whether ``text`` is a well-formed version."""
        return bool(_VERSION_RE.match(text))

    def bump(self, kind: str) -> Version:
        """The next version for a ``major``, ``minor`` or ``patch`` bump."""
        if kind == "major":
            return Version(self.major + 1, 0, 0)
        if kind == "minor":
            return Version(self.major, self.minor + 1, 0)
        if kind == "patch":
            return Version(self.major, self.minor, self.patch + 1)
        raise UserError(f"bump {kind!r} is not one of {BUMPS}")

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


def bump_rank(kind: str) -> int:
    """Order of bumps: patch < minor < major."""
    return {"patch": 0, "minor": 1, "major": 2}[kind]


def check_name(name: str, what: str = "dataset") -> str:
    """Return ``name`` if it is a safe dataset or alias name.

    Names are lower-case letters, digits, ``-`` and ``_``, starting with a letter or digit, so they
    can never escape the registry folder (``..``, ``/``, control characters).

    Raises:
        InvalidName: With a message saying what is allowed.

    """
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise InvalidName(
            f"{what} name {name!r} is invalid: use 1-63 lower-case letters, digits, '-' or '_', "
            "starting with a letter or digit"
        )
    return name


@dataclasses.dataclass(frozen=True)
class DatasetRef:
    """``<registry root>/<dataset>@<selector>``, e.g. ``gs://b/reg/penguins@1``.

    The selector is a full version (``1.2.0``), a major version (``1``, newest 1.x.x), a
    major.minor (``1.2``, newest 1.2.x) or an alias (``latest``, ``stable``...).
    """

    root: str
    dataset: str
    selector: str = "latest"

    @classmethod
    def parse(cls, text: str) -> DatasetRef:
        """Parse a reference; ``@latest`` is implied when no selector is given.

        Raises:
            InvalidName: The dataset name or selector is invalid.

        """
        base, sep, selector = text.rpartition("@")
        if not sep:
            base, selector = text, "latest"
        base = base.rstrip("/")
        if "/" not in base:
            raise InvalidName(
                f"dataset reference {text!r} needs a registry: <registry>/<dataset>@<version>"
            )
        root, dataset = storage.parent(base), storage.basename(base)
        check_name(dataset)
        if not selector:
            raise InvalidName(f"dataset reference {text!r} has an empty selector after '@'")
        if not (Version.is_version(selector) or re.fullmatch(r"\d+(\.\d+)?", selector)):
            check_name(selector, "alias")
        return cls(
            storage.normalize(root) if not storage.is_remote(root) else root, dataset, selector
        )

    def __str__(self) -> str:
        return f"{storage.join(self.root, self.dataset)}@{self.selector}"
