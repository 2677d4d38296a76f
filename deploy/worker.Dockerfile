# syntax=docker/dockerfile:1
# The reasonwire image: every command (`reasonwire` is the entrypoint: compose and the Helm chart
# pass `worker normalize`, `worker replay`, `gateway`, `topics apply`). Build context: the repo root
#   docker build -f deploy/worker.Dockerfile -t reasonwire:local .
#
# Reproducible: the base image is pinned by digest (the multi-arch index of python:3.12-slim;
# to move it, `docker buildx imagetools inspect python:3.12-slim` and change both stages'
# ARG together), and every Python package is installed from a lock with the hashes of its files
# (deploy/requirements.lock; pip --require-hashes refuses anything else). The hot path is
# compiled with mypyc in the build stage (tools/build_native.py; about a fifth less CPU per
# record, docs/benchmarks.md) and the image refuses to start without it (RW_NATIVE=require).
ARG PYTHON_IMAGE=python:3.12-slim@sha256:78387bc3881b8273120a12ebe6c1ab22b018ccc2c9adf565ae1ac9b536e184ea

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
# mypyc's extensions need a C compiler (build stage only: the runtime image has none)
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
COPY deploy/requirements.lock deploy/requirements-build.lock /locks/
# /opt/reasonwire: the runtime's packages, exactly the lock; /opt/build: the same plus mypy and
# setuptools, to compile with
RUN python -m venv /opt/reasonwire \
    && /opt/reasonwire/bin/pip install --no-deps --require-hashes --only-binary=:all: -r /locks/requirements.lock \
    && python -m venv /opt/build \
    && /opt/build/bin/pip install --no-deps --require-hashes -r /locks/requirements-build.lock
WORKDIR /app
# The checkout layout (reasonwire/ links workers/ and contracts/): workers/ops/native.py loads
# the compiled build from /app/build/native only while every source it was built from is unchanged.
COPY pyproject.toml README.md LICENSE ./
COPY reasonwire ./reasonwire
COPY contracts ./contracts
COPY workers ./workers
COPY tools/build_native.py ./tools/build_native.py
# Installed in place (editable: its metadata, the `reasonwire` script, a finder for /app), with
# the build venv's setuptools as the build backend and nothing fetched (--no-index --no-deps):
# the runtime venv holds only the lock's packages. The last line fails the build unless the
# compiled core loads.
RUN /opt/build/bin/python tools/build_native.py \
    && rm -rf tools build/native-stage \
    && PYTHONPATH="$(/opt/build/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" \
       /opt/reasonwire/bin/pip install --no-deps --no-index --no-build-isolation -e /app \
    && RW_NATIVE=require /opt/reasonwire/bin/reasonwire --version

FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/reasonwire/bin:$PATH \
    RW_NATIVE=require
COPY --from=build /opt/reasonwire /opt/reasonwire
COPY --from=build /app /app
RUN useradd --system --uid 10001 --no-create-home reasonwire
USER 10001
WORKDIR /app
# Docker's own check (compose; Kubernetes uses the chart's probes): the workers' /healthz on
# RW_HEALTH_PORT. The gateway answers on its HTTP port: compose overrides this for it.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('RW_HEALTH_PORT', '8080'), timeout=3)"]
ENTRYPOINT ["reasonwire"]
CMD ["worker", "normalize"]
