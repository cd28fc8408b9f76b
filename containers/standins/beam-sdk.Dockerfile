# Stand-in for apache/beam_python3.11_sdk:2.77.0 where no registry is reachable, built on the
# stand-in python:3.11 base (make-python-base.sh) and tagged with the real image's name so the
# suite's Dockerfile.beam-worker builds unchanged. Like the real image it has Beam (with the gcp
# extra) in the system site-packages and /opt/apache/beam/boot as its ENTRYPOINT, run as root.
# What it cannot prove: the real boot is a Go program that provisions the worker, stages
# artifacts and starts the SDK harness against the runner's control endpoints; this boot only
# starts the Python SDK worker module. Only Dataflow itself can prove the real entrypoint.
FROM python:3.11.11-slim-bookworm
RUN pip install --no-cache-dir "apache-beam[gcp]==2.77.0" \
 && mkdir -p /opt/apache/beam \
 && printf '#!/bin/sh\n# stand-in boot: start the Python SDK harness\nexec python -m apache_beam.runners.worker.sdk_worker_main "$@"\n' \
      > /opt/apache/beam/boot \
 && chmod 0755 /opt/apache/beam/boot
ENTRYPOINT ["/opt/apache/beam/boot"]
