"""Container image names: the one place the components, Dockerfiles' build command and docs use.

Images are tagged with the package version, so a compiled pipeline always names the images built
from the same code.
"""

from tfrecord_suite import __version__

REGISTRY = "ghcr.io/tfrecord-suite"
TAG = __version__

#: CPU image: kfp components, the Beam launcher (DirectRunner/Dataflow), publishing, evaluation.
COMPONENT_IMAGE = f"{REGISTRY}/tfrecord-suite:{TAG}"
#: GPU trainer image, from the matching ``tensorflow/tensorflow:<version>-gpu`` base.
TRAINER_GPU_IMAGE = f"{REGISTRY}/tfrecord-suite-gpu:{TAG}"
#: Beam SDK worker image for Dataflow custom containers (``--sdk_container_image``).
BEAM_WORKER_IMAGE = f"{REGISTRY}/tfrecord-suite-beam-worker:{TAG}"

ALL_IMAGES = {
    "component": (COMPONENT_IMAGE, "containers/Dockerfile"),
    "trainer-gpu": (TRAINER_GPU_IMAGE, "containers/Dockerfile.gpu"),
    "beam-worker": (BEAM_WORKER_IMAGE, "containers/Dockerfile.beam-worker"),
}


def trainer_image(accelerator_resource: str = "") -> str:
    """The image the trainer runs in: the GPU build on GPU nodes, the component image elsewhere."""
    return TRAINER_GPU_IMAGE if accelerator_resource == "nvidia.com/gpu" else COMPONENT_IMAGE
