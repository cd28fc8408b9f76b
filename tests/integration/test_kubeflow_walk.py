"""docs/deploy.md's "What to apply, where", typed on the one-node cluster as a reader types it.

The page's blocks marked ``<!-- kubeflow-walk -->`` are every step a user takes to run the
suite on a multi-user Kubeflow whose data is on ``s3://``: the images and ``k8s/images``,
Kubeflow Trainer and ``k8s/cluster``, the profile's namespace in ``k8s/overlays/multi-user``
and its apply, the data and the pods' storage Secret, the token, ``submit --wait``. The walk
test types them in one shell on a fresh clone (``test_docs.reader_script`` and
``test_docs.fresh_clone``: Getting started's Set up, then the walk, as the quick start is
walked), with the built kubectl first on PATH and the cluster's admin kubeconfig, changing
only:

* the assignments of the walk's first block, set to this cluster's values (:func:`values`);
* the commands that cannot run here, each replaced by its local equivalent
  (:data:`SUBSTITUTIONS`, each with its reason).

Nothing of the suite's is prepared for it: the ``kfp_profile`` fixture, which sets Kubeflow's
example profile up in Python as the page says, is not used, nor that profile (the fixture's
Secret and bindings there would hide a step the page lost): the walk runs for a profile
namespace of its own, made as Kubeflow makes one (:func:`fresh_profile`), on the cluster with
its add-ons (``node.add``, what ``make cluster-up`` installs). The walk ends with ``submit
--wait``, which exits non-zero unless the run succeeded.

The other tests here need no cluster: the walk's variables, its ``k8s/`` edits rendered with
other values than the cluster's, each pipeline it offers parsed, the Trainer version it
installs, and the README's short form held to the walk.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import test_docs

from fakes import manifests

PAGE = "docs/deploy.md"
MARKER = "kubeflow-walk"
#: An assignment of the walk's first block: ``NAME=value  # what to put there``
ASSIGNMENT = re.compile(r"^(\w+)=(\S*)\s+# (.+)$")


def walk_blocks() -> list[str]:
    """The walk's blocks, in order."""
    blocks = test_docs.marked_blocks(PAGE, MARKER)
    assert len(blocks) >= 6, f"{PAGE}: the walk's blocks are gone ({len(blocks)})"
    return blocks


def variables() -> dict[str, tuple[str, str]]:
    """``name -> (value as written, what to put there)`` of the walk's first block, which holds
    only assignments, each with its comment."""
    out = {}
    for line in walk_blocks()[0].splitlines():
        match = ASSIGNMENT.match(line)
        assert match, f"{PAGE}: not `NAME=value  # what to put there`: {line!r}"
        out[match[1]] = (match[2], match[3])
    return out


def command_lines(script: str) -> list[list[str]]:
    """Each command line of ``script`` as shell words (continuations joined, comments dropped,
    quotes kept as the shell reads them); a line of comment alone is none."""
    joined = re.sub(r"\\\n\s*", " ", script)
    lines = [shlex.split(line, comments=True) for line in joined.splitlines()]
    return [words for words in lines if words]


def expand(words: list[str], values: dict[str, str]) -> list[str]:
    """``words`` with each ``$NAME`` of ``values`` replaced by its value (no other expansion)."""
    return [re.sub(r"\$(\w+)", lambda m: values[m[1]], word) for word in words]


def submit_lines() -> list[list[str]]:
    """The walk's ``tfrecord-suite submit`` command lines."""
    found = [
        w for w in command_lines("".join(walk_blocks())) if w[:2] == ["tfrecord-suite", "submit"]
    ]
    assert found, f"{PAGE}: the walk submits nothing"
    return found


# ------------------------------------------------------------------- the walk, without a cluster


def test_the_walk_sets_its_variables_once_at_the_top_and_says_what_to_put_there():
    """The first block sets every value a user replaces, each with its comment; no later block
    sets one again, and every ``$NAME`` the walk reads is set before (by the first block or a
    command of the walk itself)."""
    names = variables()
    assert {"REGISTRY", "TAG", "NAMESPACE", "HOST", "DATA", "PIPELINE", "STEP_RESOURCES"} <= set(
        names
    )
    assert "empty for the defaults" in names["STEP_RESOURCES"][1]
    later = "".join(walk_blocks()[1:])
    assigned = set(re.findall(r"^(?:export )?(\w+)=", later, re.M))
    assert not assigned & set(names), assigned & set(names)
    read = set(re.findall(r"\$\{?(\w+)", later))
    assert read <= set(names) | assigned, read - set(names) - assigned


@pytest.mark.usefixtures("kubectl")
def test_the_walks_edits_set_the_registry_tag_and_profile_everywhere(tmp_path):
    """The walk's commands that edit ``k8s/`` (its ``sed`` lines), run with values other than
    the defaults, leave every manifest the walk applies naming that registry and tag and every
    object of the multi-user overlay in that namespace, its launcher binding to that
    namespace's ``default-editor``."""
    registry, tag, namespace = "europe-docker.pkg.dev/p/ml", "2026.11", "team-a"
    edits = [words for words in command_lines("".join(walk_blocks())) if words[0] == "sed"]
    assert len(edits) == 2 and all(w[-1].startswith("k8s/") for w in edits), edits
    shutil.copytree(os.path.join(test_docs.ROOT, "k8s"), tmp_path / "k8s")
    values = {"REGISTRY": registry, "TAG": tag, "NAMESPACE": namespace}
    for words in edits:
        subprocess.run(expand(words, values), cwd=tmp_path, check=True)
    images = set()
    for target in ("cluster", "overlays/multi-user"):
        docs = manifests.render_dir(str(tmp_path / "k8s" / target))
        images |= {image for doc in docs for image in manifests.images_in(doc)}
    assert images == {f"{registry}/tfrecord-suite:{tag}"}
    docs = manifests.render_dir(str(tmp_path / "k8s" / "overlays" / "multi-user"))
    assert {d["metadata"]["namespace"] for d in docs} == {namespace}
    (binding,) = [d for d in docs if d["kind"] == "RoleBinding"
                  and d["metadata"]["name"] == "tfrecord-suite-launcher"]  # fmt: skip
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "default-editor", "namespace": namespace}
    ]


def test_each_pipeline_the_walk_offers_parses_with_its_parameters():
    """``PIPELINE`` as written (the retraining pipeline) and each choice its comment offers
    (the data pipeline, which the cluster's walk runs) take the walk's ``--param``s."""
    names = variables()
    written, comment = names["PIPELINE"]
    offered = [written, *re.findall(r"\bor (\w+)\b", comment)]
    assert offered == ["retraining", "data"], offered
    values = {name: value for name, (value, _) in names.items()}
    for pipeline in offered:
        for words in submit_lines():
            test_docs.parse_or_fail(PAGE, expand(words, {**values, "PIPELINE": pipeline}))


def test_the_walk_installs_the_trainer_release_the_cluster_runs():
    """The Trainer the walk installs is the release the one-node cluster runs, from that
    release's own ``manifests/overlays/manager``, and no older than the minimum the page
    names for TrainJobs."""
    from realparts import parts

    text = "".join(walk_blocks())
    (ref,) = re.findall(
        r"github\.com/kubeflow/trainer\.git/manifests/overlays/manager\?ref=(\S+?)\"", text
    )
    assert ref == parts.versions()["TRAINER_VERSION"]
    page = open(os.path.join(test_docs.ROOT, PAGE)).read()
    minimum = re.search(r"^\| Kubeflow Trainer \| \*\*v([\d.]+)\*\*", page, re.M)[1]
    as_tuple = [int(p) for p in ref.lstrip("v").split(".")]
    assert as_tuple >= [int(p) for p in minimum.split(".")], (ref, minimum)


def test_the_readme_says_nothing_the_walk_does_not_do():
    """Each command of the README's "Run it on Kubeflow" block is a command of the walk, word
    for word, in the walk's order."""
    readme = open(os.path.join(test_docs.ROOT, "README.md")).read()
    section = readme.split("## Run it on Kubeflow", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```bash\n(.*?)```", section, re.S)
    walk = command_lines("".join(walk_blocks()))
    shown = command_lines(block)
    assert len(shown) >= 4
    positions = []
    for words in shown:
        assert words in walk, f"README.md shows what the walk does not do: {' '.join(words)}"
        positions.append(walk.index(words))
    assert positions == sorted(positions), "README.md shows the walk's steps out of order"


# ------------------------------------------------------------------------ the walk, on the cluster


def _suite_images() -> str:
    """What stands in for ``images build --push``, as a shell command."""
    code = (
        "from cluster import bringup, kubeflow_pipelines as kfp; "
        "kfp.suite_images(bringup.Cluster.load())"
    )
    path = os.pathsep.join(sys.path)
    return f"PYTHONPATH={shlex.quote(path)} {shlex.quote(sys.executable)} -c {shlex.quote(code)}"


#: The walk's commands that cannot run here -> (what runs in their place, why)
SUBSTITUTIONS: dict[str, tuple[str, str]] = {
    'tfrecord-suite images build --push --image-registry "$REGISTRY" --image-tag "$TAG"': (
        _suite_images(),
        "no registry is reachable from here (nor from the node): the component image, the only "
        "one a CPU run pulls, is built from the clone by the same `images build` under "
        "$REGISTRY and $TAG (tests/cluster/kubeflow_pipelines.py suite_images, against podman's "
        "Docker API) and loaded into the node's containerd, where pods find it without a pull",
    ),
    'kubectl apply --server-side -k "https://github.com/kubeflow/trainer.git/manifests/overlays/'
    'manager?ref=v2.3.0"': (
        "kubectl get crd trainjobs.trainer.kubeflow.org clustertrainingruntimes.trainer.kubeflow.org",
        "github.com cannot be reached from here: the cluster's Trainer is installed from the "
        "same release's manifests/overlays/manager, copied out of its Go module "
        "(node.add(trainer=True), tests/cluster/addons.py trainer_manifests); in its place the "
        "walk checks that the Trainer's CRDs are served",
    ),
}


def test_every_substitution_names_one_command_of_the_walk():
    text = "".join(walk_blocks())
    for command, (_, why) in SUBSTITUTIONS.items():
        assert text.count(command) == 1, command
        assert why


def values(cluster: Any, namespace: str) -> dict[str, str]:
    """The walk's variables on the one-node cluster for the profile ``namespace``: the API
    server's NodePort, the profile's part of KFP's SeaweedFS, a 2-CPU node's requests."""
    from cluster import kubeflow_pipelines as kfp

    store = kfp.object_store(cluster, namespace)
    return {
        "REGISTRY": kfp.SUITE_REGISTRY,
        "TAG": kfp.SUITE_TAG,
        "NAMESPACE": namespace,
        "HOST": kfp.api_url(cluster),
        # the part of the store the profile's own keys may write, as the page says
        "DATA": kfp.profile_prefix(namespace),
        "S3_HERE": store["AWS_ENDPOINT_URL"],
        "S3_PODS": store["in_cluster"],
        "AWS_REGION": store["AWS_REGION"],
        # the choice the page offers that runs quickest: raw data to a dataset version
        "PIPELINE": "data",
        "ACCELERATOR": "",  # the node has no GPU
        "ACCELERATORS": "0",
        "STEP_RESOURCES": kfp.SMALL_STEPS,  # the defaults ask for a 4-CPU node's share
    }


@contextlib.contextmanager
def fresh_profile(cluster: Any) -> Iterator[str]:
    """A profile namespace of its own with nothing of the suite's in it, made as the cluster
    makes Kubeflow's example profile (``kubeflow_pipelines.make_profile``: the namespace, its
    accounts and their roles, then what KFP's own profile controller returns for it, its own
    keys to the object store among them), deleted afterwards with all the walk made in it."""
    from cluster import kubeflow_pipelines as kfp
    from kubernetes import client

    namespace = f"tfrs-walk-{time.strftime('%H%M%S')}"
    try:
        kfp.make_profile(cluster, namespace)
        yield namespace
    finally:
        client.CoreV1Api(cluster.api_client()).delete_namespace(namespace)


def walk_script(settings: dict[str, str]) -> str:
    """What a reader of the walk types (``test_docs.reader_script``), the first block's
    assignments set to ``settings`` and :data:`SUBSTITUTIONS` made."""
    script = test_docs.reader_script(PAGE, MARKER)
    first = walk_blocks()[0]
    assert set(variables()) == set(settings), set(variables()) ^ set(settings)
    assert script.count(first) == 1
    filled = "".join(f"{name}={shlex.quote(settings[name])}\n" for name in variables())
    script = script.replace(first, filled)
    for command, (local, _) in SUBSTITUTIONS.items():
        assert script.count(command) == 1, command
        script = script.replace(command, local)
    return script


#: Seconds the walk may take: here about 1.5 minutes, more where the component image is rebuilt
#: for a code change
WALK_TIMEOUT = 1800


@pytest.mark.cluster
@pytest.mark.kfp
@pytest.mark.slow
@pytest.mark.timeout(WALK_TIMEOUT + 600)
def test_a_reader_walks_the_deploy_page_to_a_run_that_succeeds(
    one_node_cluster: Any, tmp_path: Any
) -> None:
    """docs/deploy.md's walk, typed on a fresh clone against the one-node cluster for a profile
    nobody prepared (:func:`fresh_profile`, named other than the one ``k8s/`` names, so the
    walk's own edit sets it), ends with a run that succeeded, on the images the walk built,
    with its data where the walk put it and the launcher Role bound where the walk bound it."""
    from cluster import kubeflow_pipelines as kfp
    from cluster import node
    from kubernetes import client
    from test_kfp import assert_images_compiled, run_pods, summary_of

    from tfrecord_suite.images import ImageSet
    from tfrecord_suite.kfp.endpoint import KfpEndpoint

    cluster = node.add(one_node_cluster, trainer=True, kfp=True)
    clone = test_docs.fresh_clone(str(tmp_path / "clone"))
    env = test_docs.reader_env()
    plane = cluster.control_plane
    env["PATH"] = os.pathsep.join([str(plane.bin_dir), env["PATH"]])
    env["KUBECONFIG"] = str(plane.admin_kubeconfig)
    if shutil.which("aws", path=env["PATH"]) is None:
        pytest.fail(
            "the walk uploads the data with the AWS CLI (`aws`), not on PATH: "
            "`make cluster-deps` installs Debian's awscli"
        )
    with fresh_profile(cluster) as namespace:
        settings = values(cluster, namespace)
        assert (settings["REGISTRY"], settings["TAG"]) == (kfp.SUITE_REGISTRY, kfp.SUITE_TAG)
        script = walk_script(settings)
        started = time.monotonic()
        try:
            proc = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", script],
                cwd=clone, capture_output=True, text=True, env=env, timeout=WALK_TIMEOUT,
            )  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            # a step's pod that cannot start (a Secret missing, say) leaves the run RUNNING,
            # and `submit --wait` waiting for its whole --timeout
            pytest.fail(f"the walk did not end in {WALK_TIMEOUT} s:\n{exc.stdout!r:.3000}")
        took = time.monotonic() - started
        assert proc.returncode == 0, f"{script}\n{proc.stdout[-3000:]}\n{proc.stderr[-4000:]}"

        summary = summary_of(proc.stdout)
        assert summary["state"] == "SUCCEEDED", summary
        assert summary["namespace"] == namespace, summary
        profile = SimpleNamespace(
            cluster=cluster,
            namespace=namespace,
            images=ImageSet(settings["REGISTRY"], settings["TAG"]),
        )
        assert_images_compiled(profile, run_pods(profile, summary["run_id"]))
        # the launcher's Role, bound by the walk's overlay to this profile's runner account
        binding = client.RbacAuthorizationV1Api(cluster.api_client()).read_namespaced_role_binding(
            "tfrecord-suite-launcher", namespace
        )
        assert [(s.kind, s.name, s.namespace) for s in binding.subjects] == [
            ("ServiceAccount", "default-editor", namespace)
        ]
        # the dataset version the run published, under the walk's registry
        bucket, _, prefix = settings["DATA"].removeprefix("s3://").partition("/")
        s3 = kfp.s3_client(kfp.object_store(cluster, namespace))
        listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/")
        keys = [o["Key"] for o in listed.get("Contents", [])]
        assert f"{prefix}/raw/penguins.csv" in keys, keys
        assert any(k.startswith(f"{prefix}/registry/penguins/") for k in keys), keys
        token = os.path.join(clone, "token")
        run = KfpEndpoint(settings["HOST"], namespace, token_file=token).client(
            namespace
        ).get_run(summary["run_id"])  # fmt: skip
    ran = (run.finished_at - run.created_at).total_seconds()
    print(f"\nthe walk: {took:.0f} s in all, of which the {settings['PIPELINE']} run {ran:.0f} s")
