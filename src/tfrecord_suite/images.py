"""Container image names: the one place the components, TFJob replicas, builds and docs use.

Images are tagged with the package version by default, so a compiled pipeline names the images
built from the same code. ``--image-registry`` and ``--image-tag`` (on ``compile``, ``submit`` and
``images build``) give an :class:`ImageSet` for the registry a user pushed their own builds to.
"""

from __future__ import annotations

import dataclasses
import re

from tfrecord_suite import __version__
from tfrecord_suite.errors import UserError

DEFAULT_REGISTRY = "ghcr.io/tfrecord-suite"
DEFAULT_TAG = __version__

#: The environment variable that tells a step which image it runs in (set in the compiled
#: pipeline, read by the steps so the manifests they write name the image that produced them).
IMAGE_ENV = "TFRECORD_SUITE_IMAGE"

#: The user the suite's images run as (their Dockerfiles' USER; not root, so every pod of ours
#: can run where Pod Security ``restricted`` is enforced)
IMAGE_UID = 10001

GPU_RESOURCE = "nvidia.com/gpu"
TPU_RESOURCE = "google.com/tpu"

# The reference grammar of the OCI distribution spec (github.com/distribution/reference): a
# registry host (with an optional port) then lower-case path components; a tag of at most 128
# word characters, dots and dashes, not starting with a dot or a dash.
_HOST = (
    r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*"
)
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REGISTRY_RE = re.compile(rf"^(?:{_HOST}(?::[0-9]+)?/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*$")
_TAG_RE = re.compile(r"^[\w][\w.-]{0,127}$")
# a digest: algorithm ":" encoded (the OCI image spec's descriptor grammar), sha256 in practice
_DIGEST_RE = re.compile(r"^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]{32,}$")

#: image key -> (repository name under the registry, Dockerfile relative to the repository root)
IMAGE_FILES = {
    "component": ("tfrecord-suite", "containers/Dockerfile"),
    "trainer-gpu": ("tfrecord-suite-gpu", "containers/Dockerfile.gpu"),
    "trainer-tpu": ("tfrecord-suite-tpu", "containers/Dockerfile.tpu"),
    "beam-worker": ("tfrecord-suite-beam-worker", "containers/Dockerfile.beam-worker"),
}


class ImageReferenceError(UserError):
    """A registry or tag that cannot form a valid image reference."""


@dataclasses.dataclass(frozen=True)
class ImageSet:
    """Where the suite's images come from.

    Attributes:
        registry: Registry and path the images live under, e.g. ``europe-docker.pkg.dev/p/repo``
            or ``localhost:5000/team``.
        tag: The tag every image carries.
        digests: ``(image key, digest)`` of the images pinned by digest, e.g.
            ``(("component", "sha256:..."),)``: their references are ``NAME:TAG@DIGEST``, which
            a container runtime pulls by the digest (k8s/images may pin them so).

    """

    registry: str = DEFAULT_REGISTRY
    tag: str = DEFAULT_TAG
    digests: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        registry = self.registry.rstrip("/")
        object.__setattr__(self, "registry", registry)
        if not _REGISTRY_RE.match(registry):
            raise ImageReferenceError(
                f"--image-registry {self.registry!r} is not a valid image registry: write "
                "host[:port]/path in lower case, e.g. europe-docker.pkg.dev/my-project/ml"
            )
        if not _TAG_RE.match(self.tag):
            raise ImageReferenceError(
                f"--image-tag {self.tag!r} is not a valid image tag: up to 128 letters, digits, "
                "'_', '.' and '-', not starting with '.' or '-'"
            )
        object.__setattr__(self, "digests", tuple(sorted(dict(self.digests).items())))
        for key, digest in self.digests:
            if key not in IMAGE_FILES:
                raise ImageReferenceError(
                    f"image digest for {key!r}: not one of the images ({', '.join(IMAGE_FILES)})"
                )
            if not _DIGEST_RE.match(digest):
                raise ImageReferenceError(
                    f"image digest {digest!r} of {key}: write ALGORITHM:HEX, e.g. sha256: and "
                    "64 hexadecimal digits"
                )

    @staticmethod
    def parse_digests(text: str) -> tuple[tuple[str, str], ...]:
        """``(image key, digest)`` pairs of ``KEY=DIGEST[,KEY=DIGEST...]`` (``--image-digests``).

        They are checked when an :class:`ImageSet` takes them.

        Raises:
            ImageReferenceError: A pair is not ``KEY=DIGEST``.

        """
        pairs = []
        for item in filter(None, (part.strip() for part in text.split(","))):
            key, sep, digest = item.partition("=")
            if not (sep and key.strip() and digest.strip()):
                raise ImageReferenceError(
                    f"--image-digests {item!r}: write IMAGE=DIGEST pairs separated by commas, "
                    f"IMAGE one of {', '.join(IMAGE_FILES)}, e.g. component=sha256:..."
                )
            pairs.append((key.strip(), digest.strip()))
        return tuple(pairs)

    @property
    def digests_text(self) -> str:
        """The digests as ``--image-digests`` takes them (:meth:`parse_digests`'s inverse)."""
        return ",".join(f"{key}={digest}" for key, digest in self.digests)

    def image(self, key: str) -> str:
        """The full reference of the image ``key`` (a key of :data:`IMAGE_FILES`)."""
        digest = dict(self.digests).get(key)
        pinned = f"@{digest}" if digest else ""
        return f"{self.registry}/{IMAGE_FILES[key][0]}:{self.tag}{pinned}"

    @property
    def component(self) -> str:
        """CPU image: every kfp component, the Beam launcher, publishing, CPU training."""
        return self.image("component")

    @property
    def beam_worker(self) -> str:
        """Beam SDK worker image for Dataflow custom containers (``--sdk_container_image``)."""
        return self.image("beam-worker")

    def trainer(self, accelerator_resource: str = "") -> str:
        """The image the trainer runs in for an accelerator resource name.

        GPUs get the CUDA build of TensorFlow, TPUs the build with TensorFlow's TPU runtime,
        everything else the CPU component image.
        """
        if accelerator_resource == GPU_RESOURCE:
            return self.image("trainer-gpu")
        if accelerator_resource == TPU_RESOURCE:
            return self.image("trainer-tpu")
        return self.component

    @classmethod
    def find(cls, image: str) -> ImageSet | None:
        """The set ``image`` belongs to (:meth:`of`), or None for any other image.

        An image of a user's own, say, whose registry may hold none of the suite's other images.
        """
        try:
            return cls.of(image)
        except ImageReferenceError:
            return None

    def table(self) -> dict[str, tuple[str, str]]:
        """``key -> (image reference, Dockerfile)`` for every image."""
        return {key: (self.image(key), path) for key, (_, path) in IMAGE_FILES.items()}

    @classmethod
    def of(cls, reference: str) -> ImageSet:
        """The set one of its images belongs to: ``REGISTRY/tfrecord-suite[-gpu...]:TAG``.

        The retraining CronJob passes its own image, so that the pipeline it compiles runs the
        build ``k8s/images`` deploys. An image pinned by digest (``NAME:TAG@DIGEST``, or
        ``NAME@DIGEST``, whose tag is then the package version's) keeps its digest; the set's
        other images go by the tag.

        Raises:
            ImageReferenceError: Not ``REGISTRY/NAME[:TAG][@DIGEST]`` with NAME one of the
                suite's images and a tag or a digest.

        """
        named, _, digest = reference.partition("@")
        name, _, tag = named.rpartition(":")
        if not name or "/" in tag:  # no tag: the colon, if any, was the registry's port
            name, tag = named, ""
        registry, _, repository = name.rpartition("/")
        keys = {repo: key for key, (repo, _) in IMAGE_FILES.items()}
        if not (registry and (tag or digest) and repository in keys):
            raise ImageReferenceError(
                f"image {reference!r} is not one of the suite's images: write "
                f"REGISTRY/NAME:TAG or REGISTRY/NAME:TAG@DIGEST with NAME one of "
                f"{', '.join(sorted(keys))}"
            )
        digests = ((keys[repository], digest),) if digest else ()
        return cls(registry, tag or DEFAULT_TAG, digests)

    @classmethod
    def from_kustomization(cls, path: str) -> ImageSet:
        """The set a kustomize images component (``k8s/images``) rewrites the defaults to.

        Args:
            path: The component's folder or its ``kustomization.yaml``.

        Raises:
            ImageReferenceError: The component does not rewrite the component image, or
                rewrites the suite's images to different registries or tags.

        """
        import os

        import yaml

        if os.path.isdir(path):
            path = os.path.join(path, "kustomization.yaml")
        with open(path) as fh:
            doc = yaml.safe_load(fh) or {}
        found = set()
        digests = {}
        for entry in doc.get("images") or []:
            key = next((k for k, (repo, _) in IMAGE_FILES.items()
                        if f"{DEFAULT_REGISTRY}/{repo}" == entry.get("name")), None)  # fmt: skip
            if key is None:
                continue
            repository = entry["name"].rpartition("/")[2]
            new_name = entry.get("newName", entry["name"])
            if not new_name.endswith(f"/{repository}"):
                raise ImageReferenceError(
                    f"{path}: {entry['name']} is renamed to {new_name}: keep the image's name "
                    "and change only the registry before it"
                )
            found.add((new_name[: -len(repository) - 1], str(entry.get("newTag", DEFAULT_TAG))))
            if entry.get("digest"):
                digests[key] = str(entry["digest"])
        if len(found) != 1:
            raise ImageReferenceError(
                f"{path}: expected every image of the suite rewritten to one registry and tag, "
                f"found {sorted(found) or 'none'}"
            )
        registry, tag = found.pop()
        return cls(registry, tag, tuple(digests.items()))


DEFAULT_IMAGES = ImageSet()
TAG = DEFAULT_TAG
#: CPU image of the default set (what components are compiled with unless told otherwise).
COMPONENT_IMAGE = DEFAULT_IMAGES.component
BEAM_WORKER_IMAGE = DEFAULT_IMAGES.beam_worker
ALL_IMAGES = DEFAULT_IMAGES.table()


def trainer_image(accelerator_resource: str = "") -> str:
    """The default set's trainer image for an accelerator resource name."""
    return DEFAULT_IMAGES.trainer(accelerator_resource)
