# Image for the `worker` service of deploy/compose.yaml. Build context: the repo root
#   docker build -f deploy/worker.Dockerfile -t reasonwire-worker .
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
# pyproject.toml names README.md (the readme) and LICENSE (license-files): the build
# needs both.
COPY pyproject.toml README.md LICENSE ./
COPY contracts ./contracts
COPY workers ./workers
RUN pip install . \
    && useradd --system --uid 10001 --no-create-home reasonwire

USER reasonwire
CMD ["reasonwire", "worker", "normalize"]
