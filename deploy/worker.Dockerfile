# Image for the `worker` service of deploy/compose.yaml. Build context: the repo root
#   docker build -f deploy/worker.Dockerfile -t reasonwire-worker .
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
# README.md* : pyproject.toml names README.md as the readme; the glob keeps the
# build working whether or not it exists yet.
COPY pyproject.toml README.md* ./
COPY contracts ./contracts
COPY workers ./workers
RUN pip install . \
    && useradd --system --uid 10001 --no-create-home reasonwire

USER reasonwire
CMD ["reasonwire", "worker", "normalize"]
