"""The two rules both registries (datasets and models) publish by, written once.

* **Versions are claimed by creating their manifest.** :func:`publish_next` proposes a version,
  creates its manifest with create-if-absent (:func:`~tfrecord_suite.io.storage.create_if_absent`:
  atomic on GCS and locally) and, when another publisher won that number, lets the proposer
  clean up and propose again. Exactly one publisher gets each number; a crash before the create
  leaves nothing a reader can see.
* **Aliases move by compare-and-swap.** :func:`move_alias` reads the alias and its token, checks
  the caller's expectation, and writes only if nobody changed it in between, so a promotion
  decided against one baseline never overwrites another, and concurrent moves never lose one.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from tfrecord_suite.io import storage

_LOG = logging.getLogger(__name__)
V = TypeVar("V")

#: ``expected`` left out: the alias move retries on contention instead of checking a baseline.
ANY = ...
#: What a proposer returns to be asked again (the state it read changed under it).
RETRY = object()
_ALIAS_TRIES = 100
_HISTORY = 20


def now() -> str:
    """The registries' timestamp: UTC, ISO 8601, milliseconds."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


@dataclasses.dataclass
class Proposal(Generic[V]):
    """One try at publishing: a version number, its manifest and how to undo the try.

    Attributes:
        version: The number asked for.
        manifest_uri: Where its manifest goes; creating it claims the number.
        manifest: The manifest's content.
        abandon: Called when another publisher won the number, before the next proposal.

    """

    version: V
    manifest_uri: str
    manifest: dict[str, Any]
    abandon: Callable[[], None] = lambda: None


def publish_next(
    propose: Callable[[int], Proposal[V] | Any],
    attempts: int,
    what: str,
    error: type[Exception],
) -> Proposal[V] | Any:
    """Claim a version: call ``propose(attempt)`` until its manifest is created.

    ``propose`` returns a :class:`Proposal`, :data:`RETRY` to be asked again, or anything else
    to stop at once (an identical version already published, say), which is returned as is.

    Raises:
        error: Every attempt lost a race.

    """
    for attempt in range(1, attempts + 1):
        proposal = propose(attempt)
        if proposal is RETRY:
            continue
        if not isinstance(proposal, Proposal):
            return proposal
        text = json.dumps(proposal.manifest, indent=2, sort_keys=True)
        if storage.create_if_absent(proposal.manifest_uri, text.encode()):
            return proposal
        _LOG.info("lost the race for %s %s; retrying", what, proposal.version)
        proposal.abandon()
    raise error(f"could not publish {what} after {attempts} attempts")


def move_alias(
    uri: str,
    target: V,
    body: dict[str, Any],
    *,
    decode: Callable[[Any], V],
    encode: Callable[[V], Any],
    expected: V | Any | None = ANY,
    only_forward: bool = False,
    what: str,
    error: type[Exception],
) -> V:
    """Point the alias stored at ``uri`` to ``target`` by compare-and-swap.

    Args:
        uri: The alias object.
        target: The version to point to (the caller checked it exists).
        body: What else the alias object says (its name, the dataset or model).
        decode: Reads a version from the alias object's ``version`` field.
        encode: Writes a version into it.
        expected: The version the alias must point to now (None: must not exist); a mismatch
            raises. Left out: retry until written.
        only_forward: Leave the alias alone if it already points to ``target`` or a newer one.
        what: How errors name the alias.
        error: Raised when contention never ends.

    Returns:
        The version the alias points to afterwards.

    Raises:
        storage.PreconditionFailed: ``expected`` was given and did not match.

    """
    for _ in range(_ALIAS_TRIES):
        data, token = storage.read_with_token(uri)
        current = None if data is None else json.loads(data)
        current_v = None if current is None else decode(current["version"])
        if expected is not ANY and current_v != expected:
            raise storage.PreconditionFailed(f"{what} points to {current_v}, expected {expected}")
        if only_forward and current_v is not None and current_v >= target:  # type: ignore[operator]
            return current_v
        history = (current or {}).get("history", [])[-(_HISTORY - 1) :]
        if current_v is not None:
            history.append({"version": encode(current_v), "until": now()})
        new = {**body, "version": encode(target), "updated": now(), "history": history}
        try:
            storage.compare_and_swap(uri, json.dumps(new, indent=2).encode(), token)
            return target
        except storage.PreconditionFailed:
            if expected is not ANY:
                raise
            time.sleep(0.01)
    raise error(f"{what}: too much contention, try again")
