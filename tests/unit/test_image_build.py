"""`tfrecord-suite images build` through the Docker SDK against a real engine: podman's
Docker-compatible API on a unix socket (no Docker engine here). The images built here need no
registry pull and no RUN step (podman without a network can still build them); the suite's own
Dockerfiles pull their bases, so they are built the same way wherever an engine can pull."""

import json
import os
import shutil
import subprocess
import tempfile

import pytest
from click.testing import CliRunner

from realparts.processes import WaitError, wait_for
from tfrecord_suite.cli.main import main
from tfrecord_suite.image_build import ImageBuildConfig, ImageBuildError, build_images


@pytest.fixture(scope="module")
def podman_socket(tmp_path_factory):
    exe = shutil.which("podman")
    if exe is None:
        pytest.skip("podman is not installed (.ci/run installs it from Debian when it can)")
    root = tmp_path_factory.mktemp("podman")
    sock = root / "podman.sock"
    # podman refuses a runroot longer than 50 characters, which a pytest-xdist worker's
    # temporary folder is: a short one of its own under /tmp
    runroot = tempfile.mkdtemp(prefix="tfrs-podman-run-")
    storage = ["--root", str(root / "storage"), "--runroot", runroot]
    proc = subprocess.Popen(
        [exe, *storage, "--storage-driver=vfs", "system", "service", "--time=0", f"unix://{sock}"],
        stdout=subprocess.DEVNULL,
        stderr=open(root / "service.log", "wb"),
    )
    try:
        wait_for(sock.exists, 30, "podman system service", alive=lambda: proc.poll() is None,
                 interval=0.1)  # fmt: skip
    except WaitError:
        proc.kill()
        pytest.fail(f"podman system service did not start: {(root / 'service.log').read_text()}")
    yield f"unix://{sock}"
    proc.terminate()
    proc.wait(timeout=10)
    shutil.rmtree(runroot, ignore_errors=True)


def _context(tmp_path):
    (tmp_path / "containers").mkdir()
    (tmp_path / "payload.txt").write_text("tfrecord-suite\n")
    (tmp_path / "containers" / "Dockerfile.tiny").write_text(
        "FROM scratch\n"
        "ARG VERSION=0\n"
        'LABEL org.opencontainers.image.title="tiny" org.opencontainers.image.version="${VERSION}"\n'
        "COPY payload.txt /payload.txt\n"
        "USER 10001\n"
    )
    return str(tmp_path)


def test_builds_through_the_docker_sdk(podman_socket, tmp_path):
    import docker

    table = {"tiny": ("localhost/tfrecord-suite-tiny:9.9.9", "containers/Dockerfile.tiny")}
    lines = []
    built = build_images(
        ImageBuildConfig(docker_host=podman_socket, context=_context(tmp_path)),
        table=table,
        progress=lines.append,
    )
    assert [b["image"] for b in built] == ["localhost/tfrecord-suite-tiny:9.9.9"]
    assert any("COPY payload.txt" in line for line in lines)
    image = docker.DockerClient(base_url=podman_socket).images.get(built[0]["image"])
    assert image.id == built[0]["id"]
    labels = image.labels
    assert labels["org.opencontainers.image.title"] == "tiny"
    from tfrecord_suite import images

    assert labels["org.opencontainers.image.version"] == images.TAG  # VERSION build arg
    assert image.attrs["Config"]["User"] == "10001"


def test_build_and_push_errors_name_the_image(podman_socket, tmp_path):
    ctx = _context(tmp_path)
    (tmp_path / "containers" / "Dockerfile.broken").write_text("FROM scratch\nCOPY missing.txt /\n")
    with pytest.raises(ImageBuildError, match=r"building localhost/broken:1 .* failed"):
        build_images(
            ImageBuildConfig(docker_host=podman_socket, context=ctx),
            table={"broken": ("localhost/broken:1", "containers/Dockerfile.broken")},
        )
    with pytest.raises(ImageBuildError, match=r"pushing 127.0.0.1:9/tiny:1 failed"):
        build_images(
            ImageBuildConfig(docker_host=podman_socket, context=ctx, push=True),
            table={"tiny": ("127.0.0.1:9/tiny:1", "containers/Dockerfile.tiny")},
        )


def test_no_engine_is_a_clear_error(tmp_path):
    r = CliRunner().invoke(
        main, ["images", "build", "--docker-host", f"unix://{tmp_path}/nothing.sock"]
    )
    assert r.exit_code == 1
    assert "no container engine reachable at unix://" in r.output
    assert "podman system service" in r.output


def test_images_list_and_unknown_selection():
    r = CliRunner().invoke(main, ["images", "list", "--json"])
    table = json.loads(r.output)
    assert set(table) == {"component", "trainer-gpu", "trainer-tpu", "beam-worker"}
    assert all(os.path.isfile(v["dockerfile"]) for v in table.values())
    with pytest.raises(ValueError, match="unknown image"):
        ImageBuildConfig(only="gpu").selected({"component": ("a", "b")})
    r = CliRunner().invoke(
        main,
        ["images", "list", "--json", "--image-registry", "localhost:5000/ml", "--image-tag", "t1"],
    )
    assert json.loads(r.output)["trainer-gpu"]["image"] == "localhost:5000/ml/tfrecord-suite-gpu:t1"
    r = CliRunner().invoke(main, ["images", "list", "--image-tag", "t1", "--tag-only"])
    assert (r.exit_code, r.output) == (0, "t1\n")
    r = CliRunner().invoke(main, ["images", "list", "--tag-only", "--key", "component"])
    assert r.exit_code == 2 and "give one" in r.output
    r = CliRunner().invoke(main, ["images", "build", "--image-registry", "Bad Registry!"])
    assert r.exit_code == 2
    assert r.output.strip().splitlines() == [
        "error: --image-registry 'Bad Registry!' is not a valid image registry: write "
        "host[:port]/path in lower case, e.g. europe-docker.pkg.dev/my-project/ml"
    ]
