"""The real parts' versions, cache and builds: the one front of ``build.sh`` for the tests.

``versions.env`` pins every part's version; ``build.sh`` builds each part from its published
sources into a cache folder of its own (:func:`part_dir`) and marks it finished with a
``.complete`` file. The control plane, the one-node cluster, SeaweedFS, Beam's runners, the
ml-metadata environment and checkov find their parts here.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: The parts whose folder is ``NAME-VERSION``: ``part -> versions.env key``
VERSIONED = {
    "etcd": "ETCD_VERSION",
    "kubernetes": "KUBERNETES_VERSION",
    "kubernetes-node": "KUBERNETES_VERSION",
    "pause": "KUBERNETES_VERSION",
    "containerd": "CONTAINERD_VERSION",
    "runc": "RUNC_VERSION",
    "cni-plugins": "CNI_PLUGINS_VERSION",
    "coredns": "COREDNS_VERSION",
    "jobset": "JOBSET_VERSION",
    "trainer": "TRAINER_VERSION",
    "seaweedfs": "SEAWEEDFS_VERSION",
    "kfp": "KFP_VERSION",
    "kfp-ui": "KFP_VERSION",
    "argo": "ARGO_VERSION",
    "grpcwebproxy": "GRPC_WEB_VERSION",
    "kube-network-policies": "KUBE_NETWORK_POLICIES_VERSION",
}
#: The parts whose build.sh name is not their folder's
BUILD_NAMES = {"kfp": "kfp-backend"}


def versions() -> dict[str, str]:
    """The pins of versions.env."""
    pins = {}
    for line in (HERE / "versions.env").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            pins[key] = value
    return pins


def cache_root() -> Path:
    """Where build.sh puts what it builds (the same rule as build.sh)."""
    if os.environ.get("TFRS_REALPARTS_CACHE"):
        return Path(os.environ["TFRS_REALPARTS_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "tfrecord-suite" / "realparts"


def part_dir(part: str) -> Path:
    """The folder build.sh makes for ``part``: one of :data:`VERSIONED` (``NAME-VERSION``), or
    ``crds``, ``crds-old``, ``prism``, ``flink``, ``spark`` or ``mlmd``."""
    pins = versions()
    if part in VERSIONED:
        return cache_root() / f"{part}-{pins[VERSIONED[part]]}"
    names = {
        "crds": f"crds-trainer-{pins['TRAINER_VERSION']}"
        f"-training-operator-{pins['TRAINING_OPERATOR_VERSION']}",
        "crds-old": f"crds-trainer-{pins['TRAINER_OLD_VERSION']}",
        # Beam's runners (realparts/runners.py)
        "prism": f"prism-{pins['BEAM_VERSION']}",
        "flink": f"beam-flink-job-server-{pins['BEAM_JOB_SERVER_VERSION']}"
        f"-flink-{pins['FLINK_RUNNER']}",
        "spark": f"beam-spark-job-server-{pins['BEAM_JOB_SERVER_VERSION']}"
        f"-spark-{pins['SPARK_VERSION']}",
        # the ml-metadata environment (realparts/mlmd.py)
        "mlmd": f"mlmd-{pins['ML_METADATA_VERSION']}",
    }
    return cache_root() / names[part]


def built(part: str) -> Path | None:
    """:func:`part_dir` of ``part`` if build.sh has finished it."""
    folder = part_dir(part)
    return folder if (folder / ".complete").exists() else None


def build(part: str) -> Path:
    """Build ``part`` now if it is not in the cache (minutes the first time)."""
    out = subprocess.run(
        ["bash", str(HERE / "build.sh"), part], check=True, capture_output=True, text=True
    ).stdout
    return Path(out.strip().splitlines()[-1])


def ensure_built(part: str) -> Path:
    """:func:`part_dir` of ``part``, built first (by its build.sh name) where it is missing."""
    folder = part_dir(part)
    if not (folder / ".complete").exists():
        build(BUILD_NAMES.get(part, part))
    return folder
