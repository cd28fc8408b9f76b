"""A model registry beside the dataset registry: numbered, checksummed model versions and aliases.

Layout::

    <root>/<model>/<N>/model.json               the version exists iff this exists
    <root>/<model>/<N>/data-<attempt>/...       the SavedModel and its metrics, copied first
    <root>/<model>/aliases/<alias>.json         ``stable`` and friends, compare-and-swap

Versions are 1, 2, 3...: a model has no compatibility contract to encode in the number, and its
lineage (the dataset version and digest it was trained on, its evaluation) is in ``model.json``.
Publishing copies the files into a folder unique to the attempt and then creates ``model.json``
with create-if-absent (:mod:`tfrecord_suite.registry.store`, the rule dataset versions follow
too), so concurrent registrations each get their own number and a crash leaves nothing a reader
can see.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import uuid
from typing import Any

from tfrecord_suite import __version__
from tfrecord_suite.errors import UserError
from tfrecord_suite.io import storage
from tfrecord_suite.registry import store
from tfrecord_suite.registry.refs import check_name

_LOG = logging.getLogger(__name__)
MODEL_MANIFEST = "model.json"
ALIASES = "aliases"
_ATTEMPTS = 20


class ModelRegistryError(UserError, RuntimeError):
    """A model version is missing, corrupt or cannot be registered."""


@dataclasses.dataclass(frozen=True)
class RegisteredModel:
    """One registered model version.

    Attributes:
        name: Model name.
        version: Its number.
        uri: The version folder.
        export_dir: The SavedModel inside it (``serving_default`` takes serialized tf.Examples).
        manifest: The parsed ``model.json``.

    """

    name: str
    version: int
    uri: str
    export_dir: str
    manifest: dict[str, Any]


class ModelRegistry:
    """Model versions and aliases under one root (a folder, a ``gs://`` or ``s3://`` prefix)."""

    def __init__(self, root: str):
        self.root = storage.normalize(root)

    def model_dir(self, name: str) -> str:
        """Folder of a model."""
        return storage.join(self.root, check_name(name, "model"))

    def version_dir(self, name: str, version: int) -> str:
        """Folder of one version."""
        return storage.join(self.model_dir(name), str(int(version)))

    def alias_uri(self, name: str, alias: str) -> str:
        """URI of an alias pointer."""
        return storage.join(self.model_dir(name), ALIASES, f"{check_name(alias, 'alias')}.json")

    def versions(self, name: str) -> list[int]:
        """Registered versions, oldest first."""
        return sorted(
            int(d)
            for d in storage.list_dirs(self.model_dir(name))
            if d.isdigit() and storage.exists(storage.join(self.model_dir(name), d, MODEL_MANIFEST))
        )

    def get(self, name: str, version: int) -> RegisteredModel:
        """One version.

        Raises:
            ModelRegistryError: It does not exist or its manifest is unreadable.

        """
        vdir = self.version_dir(name, version)
        uri = storage.join(vdir, MODEL_MANIFEST)
        try:
            manifest = json.loads(storage.read_text(uri))
        except FileNotFoundError:
            raise ModelRegistryError(
                f"model {name} v{version} does not exist in {self.root}"
            ) from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ModelRegistryError(f"{uri}: not valid JSON ({exc})") from None
        return RegisteredModel(
            name, int(version), vdir, storage.join(vdir, manifest["export_dir"]), manifest
        )

    def alias(self, name: str, alias: str) -> int | None:
        """The version an alias points to, or None."""
        data, _ = storage.read_with_token(self.alias_uri(name, alias))
        return None if data is None else int(json.loads(data)["version"])

    def aliases(self, name: str) -> dict[str, int]:
        """Every alias of a model and the version it points to."""
        out = {}
        for info in storage.list_files(storage.join(self.model_dir(name), "aliases")):
            alias = storage.basename(info.uri).removesuffix(".json")
            version = self.alias(name, alias)
            if version is not None:
                out[alias] = version
        return out

    def listing(self, name: str) -> list[dict[str, Any]]:
        """A line per version: number, creation time, dataset, gate decision and aliases."""
        by_version: dict[int, list[str]] = {}
        for alias, version in self.aliases(name).items():
            by_version.setdefault(version, []).append(alias)
        out = []
        for v in self.versions(name):
            manifest = self.get(name, v).manifest
            lineage = manifest["lineage"]
            out.append(
                {
                    "version": v,
                    "created": manifest["created"],
                    "dataset": lineage.get("dataset"),
                    "gate": lineage.get("evaluation", {}).get("decision"),
                    "aliases": sorted(by_version.get(v, [])),
                }
            )
        return out

    def resolve(self, name: str, selector: str = "stable") -> RegisteredModel | None:
        """A version by number or alias (``latest`` is the newest); None when there is none."""
        if selector.isdigit():
            return self.get(name, int(selector))
        version = self.alias(name, selector)
        if version is None and selector == "latest":
            versions = self.versions(name)
            version = versions[-1] if versions else None
        return None if version is None else self.get(name, version)

    def set_alias(
        self,
        name: str,
        alias: str,
        version: int,
        expected: int | Any | None = ...,
        only_forward: bool = False,
    ) -> int:
        """Point ``alias`` at ``version`` with compare-and-swap.

        Args:
            name: Model name.
            alias: Alias name.
            version: Target version; must exist.
            expected: The version the alias must point to now (None: must not exist). A
                mismatch raises, so a promotion decided against one baseline never overwrites a
                different model promoted meanwhile. Omitted: retry until written.
            only_forward: Leave the alias alone if it already points to a newer version.

        Raises:
            storage.PreconditionFailed: ``expected`` did not match.
            ModelRegistryError: ``version`` does not exist.

        """
        self.get(name, version)
        return store.move_alias(
            self.alias_uri(name, alias),
            int(version),
            {"alias": alias, "model": name},
            decode=int,
            encode=int,
            expected=expected,
            only_forward=only_forward,
            what=f"alias {alias!r} of model {name}",
            error=ModelRegistryError,
        )

    def register(
        self,
        name: str,
        model_dir: str,
        export_subdir: str,
        lineage: dict[str, Any],
    ) -> RegisteredModel:
        """Copy ``model_dir`` (SavedModel, metrics, report) into a new version.

        Args:
            name: Model name.
            model_dir: The training step's output folder.
            export_subdir: The SavedModel's folder, relative to ``model_dir``.
            lineage: Dataset ref and digest, evaluation, pipeline run... stored in the manifest.

        A retry of the same pipeline run is idempotent: when a version already holds the same
        files registered by the same ``lineage["pipeline_run_id"]``, that version is returned
        instead of a new number.

        Raises:
            ModelRegistryError: ``model_dir`` holds no SavedModel, or registration kept losing.

        """
        check_name(name, "model")
        model_dir = storage.normalize(model_dir)
        files = [
            f
            for f in storage.list_files(model_dir)
            # checkpoints, backups and TensorBoard logs are training by-products, not the model
            if storage.relative_to(f.uri, model_dir).split("/")[0]
            not in ("backup", "checkpoints", "logs")
        ]
        rel = [storage.relative_to(f.uri, model_dir) for f in files]
        if f"{export_subdir}/saved_model.pb" not in rel:
            raise ModelRegistryError(
                f"{model_dir} holds no SavedModel at {export_subdir}/saved_model.pb"
            )
        ordered = sorted(zip(files, rel, strict=True), key=lambda p: p[1])
        digests = {r: storage.sha256(f.uri) for f, r in ordered}
        content_digest = _content_digest(digests)
        run_id = lineage.get("pipeline_run_id")
        if run_id:
            earlier = self._registered_by(name, run_id, content_digest)
            if earlier is not None:
                _LOG.info(
                    "model %s v%d already holds this run's model (%s): a retry, not registered "
                    "again",
                    name,
                    earlier.version,
                    run_id,
                )
                return earlier

        def propose(_attempt: int) -> store.Proposal[int]:
            existing = self.versions(name)
            version = (existing[-1] if existing else 0) + 1
            vdir = self.version_dir(name, version)
            attempt = f"data-{uuid.uuid4().hex[:12]}"
            entries = []
            for f, r in ordered:
                dst = storage.join(vdir, attempt, r)
                storage.copy(f.uri, dst)
                digest = storage.sha256(dst)
                if digest != digests[r]:
                    raise ModelRegistryError(f"{f.uri} changed while it was being registered")
                entries.append({"path": r, "bytes": storage.stat(dst).size, "sha256": digest})
            manifest = {
                "format": 1,
                "model": name,
                "version": version,
                "created": store.now(),
                "files_dir": attempt,
                "export_dir": f"{attempt}/{export_subdir}",
                "files": entries,
                "content_digest": content_digest,
                "lineage": lineage,
                "producer": {"package": f"tfrecord-suite {__version__}"},
            }
            return store.Proposal(
                version,
                storage.join(vdir, MODEL_MANIFEST),
                manifest,
                abandon=lambda: storage.delete_tree(storage.join(vdir, attempt)),
            )

        won = store.publish_next(propose, _ATTEMPTS, f"model {name}", ModelRegistryError)
        self.set_alias(name, "latest", won.version, only_forward=True)
        return self.get(name, won.version)

    def _registered_by(self, name: str, run_id: str, content_digest: str) -> RegisteredModel | None:
        """The version a pipeline run already registered with this content, if any."""
        for version in reversed(self.versions(name)):
            model = self.get(name, version)
            if (
                model.manifest.get("lineage", {}).get("pipeline_run_id") == run_id
                and model.manifest.get("content_digest") == content_digest
            ):
                return model
        return None

    def verify(self, name: str, version: int) -> RegisteredModel:
        """Check every file of a version against its manifest.

        Raises:
            ModelRegistryError: Naming each missing or changed file.

        """
        model = self.get(name, version)
        problems = []
        for entry in model.manifest["files"]:
            uri = storage.join(model.uri, model.manifest["files_dir"], entry["path"])
            if not storage.exists(uri):
                problems.append(f"{entry['path']}: missing")
            elif storage.sha256(uri) != entry["sha256"]:
                problems.append(f"{entry['path']}: checksum mismatch")
        if problems:
            raise ModelRegistryError(f"model {name} v{version} is corrupt: " + "; ".join(problems))
        return model


def _content_digest(digests: dict[str, str]) -> str:
    """Order-independent digest of a model's files: relative path and sha256 of each."""
    content = hashlib.sha256()
    for path in sorted(digests):
        content.update(f"{path}\0{digests[path]}\n".encode())
    return content.hexdigest()
