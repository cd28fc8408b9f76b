"""``python -m cluster up|down|status`` (PYTHONPATH=tests): what ``make cluster-up`` and
``make cluster-down`` run."""

from __future__ import annotations

import argparse
import sys

from cluster import node
from cluster.bringup import Cluster
from cluster.host import ClusterError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cluster", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="bring the cluster up (or find it running)")
    up.add_argument("--no-trainer", action="store_true", help="skip JobSet and the Trainer")
    up.add_argument("--no-kfp", action="store_true", help="skip Kubeflow Pipelines")
    up.add_argument(
        "--image", action="append", default=[], help="also load this podman image (repeatable)"
    )
    sub.add_parser("down", help="stop it and remove everything it made")
    sub.add_parser("status", help="its processes, node and pods")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            node.up(
                trainer=not args.no_trainer, kfp=not args.no_kfp, suite_images=tuple(args.image)
            )
        elif args.command == "down":
            node.down()
        else:
            cluster = Cluster.load()
            if cluster is None:
                print("no cluster")
                return 1
            for name, alive in cluster.alive().items():
                print(f"{name}: {'running' if alive else 'stopped'}")
            print("steps done: " + ", ".join(f"{k} ({v:.0f} s)" for k, v in cluster.steps.items()))
            print(f"KUBECONFIG={cluster.control_plane.admin_kubeconfig}")
            print(cluster.kubectl("get", "nodes,pods", "-A", "-o", "wide", check=False).stdout)
    except ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
