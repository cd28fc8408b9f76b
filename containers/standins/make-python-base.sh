#!/usr/bin/env bash
# Make a local stand-in for the official `python:3.11-slim-bookworm` image where no registry is
# reachable, so the suite's Dockerfiles build unchanged: Debian bookworm (debootstrap, minbase,
# from the Debian mirror) with Python 3.11 laid out as the official image lays it out: `python`,
# `python3`, `python3.11`, `pip` in /usr/local/bin first on PATH, packages in
# /usr/local/lib/python3.11/site-packages, LANG=C.UTF-8, CMD python3. It is imported into the
# engine under the exact name the Dockerfile pins (podman import), so `FROM` finds it locally.
#
# What the stand-in cannot prove: the official image compiles CPython 3.11.11 from source into
# /usr/local; here /usr/local is a virtual environment over Debian's python3.11 (3.11.2), which
# gives the same paths and the same pip behaviour, not the same interpreter build.
#
# usage: make-python-base.sh IMAGE_NAME [CA_BUNDLE]
#   CA_BUNDLE: the host's CA bundle, copied into the image as PIP_CERT so pip inside a build
#   trusts what the host trusts (a TLS-intercepting proxy); put at a path that Debian's
#   ca-certificates package never regenerates.
set -euo pipefail
name=${1:?usage: make-python-base.sh IMAGE_NAME [CA_BUNDLE]}
ca_bundle=${2:-/etc/ssl/certs/ca-certificates.crt}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
podman=${PODMAN:-podman}

if "$podman" image exists "$name"; then
  echo "stand-in base $name already present"
  exit 0
fi
rootfs=$(mktemp -d /var/tmp/tfrs-rootfs.XXXXXX)
trap 'rm -rf "$rootfs" "$rootfs.log"' EXIT
echo "debootstrap bookworm (minbase) from $mirror into $rootfs"
debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 \
  || { tail -n 30 "$rootfs.log" "$rootfs/debootstrap/debootstrap.log"; exit 1; }
rm -f "$rootfs.log"
# the official image's runtime packages, and Debian's Python 3.11 (with ensurepip, for the venv)
chroot "$rootfs" /usr/bin/env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
  --no-install-recommends python3.11 python3.11-venv ca-certificates netbase tzdata >/dev/null
# /usr/local as a virtual environment: python/pip in /usr/local/bin, packages in
# /usr/local/lib/python3.11/site-packages (the official image's paths); a venv is also exempt from
# Debian's EXTERNALLY-MANAGED marker, as the official image's own Python is
chroot "$rootfs" /usr/bin/python3.11 -m venv /usr/local
chroot "$rootfs" /usr/local/bin/pip install --quiet --no-index --upgrade pip 2>/dev/null || true
ln -sf python3.11 "$rootfs/usr/local/bin/python3"
ln -sf python3 "$rootfs/usr/local/bin/python"
ln -sf pip3.11 "$rootfs/usr/local/bin/pip3" 2>/dev/null || true
mkdir -p "$rootfs/usr/local/share/tfrs-standin"
cp "$ca_bundle" "$rootfs/usr/local/share/tfrs-standin/host-ca-bundle.pem"
chroot "$rootfs" apt-get clean
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin
version=$(chroot "$rootfs" /usr/local/bin/python3 -c 'import platform; print(platform.python_version())')
tar -C "$rootfs" -c . | "$podman" import \
  --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change "ENV PYTHON_VERSION=$version" \
  --change 'ENV PIP_CERT=/usr/local/share/tfrs-standin/host-ca-bundle.pem' \
  --change 'CMD ["python3"]' \
  - "$name" >/dev/null
echo "stand-in base $name made (Python $version)"
