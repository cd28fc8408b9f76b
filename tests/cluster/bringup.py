"""The one-node cluster as bring-up shares it: :class:`Cluster` (the running cluster and its saved
state), :class:`Step` (one step of bringing it up) and :func:`run_steps`.

The node's steps (``node.py``) and the add-ons' (``addons.py``, ``kubeflow_pipelines.py``) are
functions of a :class:`Cluster`; ``node.up`` runs them all, in order. The parts each step runs are
built by ``tests/realparts/build.sh`` and found with ``realparts.parts.ensure_built``.

State (processes, certificates, kubeconfigs, containerd's images) lives in one folder,
``$TFRS_CLUSTER_DIR`` (default ``/var/lib/tfrecord-suite/cluster``); ``state.json`` there lets
another process (a test session, ``cluster-down``) find the running cluster.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from cluster import host, images
from cluster.host import ClusterError
from realparts import controlplane, processes
from realparts.parts import ensure_built

STATE_ENV = "TFRS_CLUSTER_DIR"
DEFAULT_STATE = Path("/var/lib/tfrecord-suite/cluster")


def state_dir() -> Path:
    """``$TFRS_CLUSTER_DIR`` or the default."""
    return Path(os.environ.get(STATE_ENV) or DEFAULT_STATE)


#: How deep this process holds each state folder's lock (:meth:`Cluster.exclusive`)
_HELD: dict[Path, int] = {}


@dataclasses.dataclass
class Cluster:
    """A cluster, running or being brought up: its state folder, control plane and processes.

    Attributes:
        state: The state folder.
        plane: The control plane (None until its step has run).
        pids: Each started process's id.
        system_images: ``part -> image`` of the cluster's own images (:func:`system_images`).
        loaded_ids: podman's image ID of each image loaded into the node.
        steps: ``step -> seconds it took`` of each step done, in order.
        sysctls: The host's kernel tunables before the kubelet started.

    """

    state: Path
    plane: controlplane.ControlPlane | None = None
    pids: dict[str, int] = dataclasses.field(default_factory=dict)
    system_images: dict[str, str] = dataclasses.field(default_factory=dict)
    loaded_ids: dict[str, str] = dataclasses.field(default_factory=dict)
    steps: dict[str, float] = dataclasses.field(default_factory=dict)
    sysctls: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def control_plane(self) -> controlplane.ControlPlane:
        """The control plane (an error before its step has run)."""
        if self.plane is None:
            raise ClusterError("the control plane has not been started")
        return self.plane

    @property
    def containerd_socket(self) -> Path:
        return self.state / "run" / "containerd.sock"

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> Any:
        """The built ``kubectl`` as the cluster's admin."""
        return self.control_plane.kubectl(*args, stdin=stdin, check=check)

    def apply(self, stream: str, manager: str = "tfrs-cluster") -> None:
        """``kubectl apply --server-side`` of a YAML or JSON stream, as the admin."""
        self.kubectl("apply", "--server-side", "--force-conflicts", f"--field-manager={manager}",
                     "-f", "-", stdin=stream)  # fmt: skip

    def api_client(self, **kwargs: Any) -> Any:
        """A ``kubernetes`` client as the admin (see ``ControlPlane.api_client``)."""
        return self.control_plane.api_client(**kwargs)

    def ctr(self, *args: str) -> str:
        """``ctr`` against the cluster's containerd, namespace ``k8s.io``."""
        return subprocess.run(
            [str(ensure_built("containerd") / "bin" / "ctr"), "--address", str(self.containerd_socket),
             "--namespace", "k8s.io", *args],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[Cluster]:
        """Change the cluster (run a step, load an image) with no other process doing so.

        The cluster tests run on two pytest-xdist workers, and each installs the add-ons and
        loads the images it needs: two installs at once would fight over the same objects, and
        each process's ``state.json`` would drop what the other saved. Inside, this process
        holds the state folder's lock (``flock``; taken again inside, it is held already) and
        has read the steps done and the images loaded as the last holder saved them."""
        key = self.state.resolve()
        if _HELD.get(key):
            _HELD[key] += 1
            try:
                yield self
            finally:
                _HELD[key] -= 1
            return
        self.state.mkdir(parents=True, exist_ok=True)
        with open(self.state / "state.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            _HELD[key] = 1
            try:
                saved = Cluster.load(self.state)
                if saved is not None:
                    self.steps.update(saved.steps)
                    self.loaded_ids.update(saved.loaded_ids)
                yield self
            finally:
                _HELD[key] = 0
                fcntl.flock(lock, fcntl.LOCK_UN)

    def load_images(self, names: list[str]) -> None:
        """Load these images from podman's storage into the node where it lacks them or holds
        an older build (podman's image ID differs from the one loaded)."""
        ctr = ensure_built("containerd") / "bin" / "ctr"
        with self.exclusive():
            have = images.loaded(ctr, self.containerd_socket)
            ids = {n: images.image_id(n) for n in names}
            stale = [n for n in names if n not in have or self.loaded_ids.get(n) != ids[n]]
            if stale:
                images.load(stale, ctr, self.containerd_socket)
                self.loaded_ids.update({n: ids[n] for n in stale})
                self.save()

    def image_digest(self, name: str) -> str:
        """The digest the node's containerd holds the loaded image ``name`` by (tagged
        ``REPO@DIGEST`` there: :func:`images.pin`)."""
        return images.pin(ensure_built("containerd") / "bin" / "ctr", self.containerd_socket, name)

    def alive(self) -> dict[str, bool]:
        """Whether each of its processes still runs."""
        return {name: host.running(pid, name) for name, pid in self.pids.items()}

    def is_running(self) -> bool:
        """Whether it was brought up and every one of its processes still runs."""
        return bool(self.pids) and all(self.alive().values())

    def log(self, name: str) -> str:
        """The last lines of a process's log."""
        return processes.log_tail(self.state / "logs" / f"{name}.log")

    def spawn(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        """Start one of the cluster's processes; it outlives the process that started it."""
        log = self.state / "logs" / f"{name}.log"
        self.pids[name] = processes.spawn(argv, log, env, die_with_parent=False).pid
        self.save()

    def wait(self, what: str, ready: Callable[[], Any], timeout: float, process: str = "") -> None:
        """Wait until ``ready()``; where ``process`` is named, fail as soon as it exits."""
        try:
            processes.wait_for(
                ready,
                timeout,
                what,
                alive=(lambda: self.alive()[process]) if process else None,
                log=(lambda: self.log(process)) if process else None,
                interval=1,
            )
        except processes.WaitError as exc:
            raise ClusterError(str(exc)) from None

    def save(self) -> None:
        plane = self.plane
        saved: dict[str, Any] = {
            "pids": self.pids,
            "system_images": self.system_images,
            "loaded_ids": self.loaded_ids,
            "steps": self.steps,
            "sysctls": self.sysctls,
        }
        if plane is not None:
            saved["plane"] = {
                "url": plane.url,
                "workdir": str(plane.workdir),
                "bin_dir": str(plane.bin_dir),
                "ca_file": str(plane.ca_file),
                "admin_kubeconfig": str(plane.admin_kubeconfig),
            }
        (self.state / "state.json").write_text(json.dumps(saved, indent=2))

    @classmethod
    def load(cls, state: Path | None = None) -> Cluster | None:
        """The cluster whose state is in ``state``, or None where there is none."""
        state = state or state_dir()
        path = state / "state.json"
        if not path.exists():
            return None
        saved = json.loads(path.read_text())
        plane = None
        if "plane" in saved:
            paths = {k: Path(v) for k, v in saved["plane"].items() if k != "url"}
            plane = controlplane.ControlPlane(url=saved["plane"]["url"], **paths)
        return cls(state, plane, saved["pids"], saved["system_images"], saved["loaded_ids"],
                   saved["steps"], saved["sysctls"])  # fmt: skip


# -------------------------------------------------------------------------------------- steps


@dataclasses.dataclass(frozen=True)
class Step:
    """One step of bringing the cluster up.

    Attributes:
        name: What it does, as the progress line says it.
        run: Does it, given the cluster as the steps before left it.

    """

    name: str
    run: Callable[[Cluster], None]


def run_steps(cluster: Cluster, steps: tuple[Step, ...] | list[Step]) -> None:
    """Run each step not done yet, in order: time it, say it, save the state after it. Each
    step holds the cluster's lock (:meth:`Cluster.exclusive`): a step another process is
    running is waited for, and then found done."""
    for step in steps:
        with cluster.exclusive():
            if step.name in cluster.steps:
                continue
            started = time.monotonic()
            try:
                step.run(cluster)
            except Exception as exc:
                cluster.save()
                raise ClusterError(f"{step.name}: {exc}") from exc
            cluster.steps[step.name] = round(time.monotonic() - started, 1)
            cluster.save()
        print(f"  {step.name}: {cluster.steps[step.name]:.0f} s", flush=True)
