"""``python -m bench.worker_main``: the real normalizer worker on the benchmark's own topics.

The worker's topic names are constants (``reasonwire.contracts.topics``). A benchmark that
published to ``reasoning.raw.v1`` would be consumed by every other worker and
test group on the same broker, and would consume theirs. So this entry point
prefixes every ``reasoning.*`` topic name with ``$RW_BENCH_TOPIC_PREFIX``
before the worker module is imported, then runs the unchanged worker
(``reasonwire.workers.services.normalizer_app.run``), configured from the environment as usual.
Nothing else differs from ``reasonwire worker normalize``.

With ``RW_BENCH_TELEMETRY=off`` the worker's telemetry (``reasonwire.workers.ops.telemetry``:
OpenTelemetry spans, metrics and the content guard) is replaced by a null
object, to measure the worker as it was before telemetry and what telemetry
costs. The default is the worker exactly as shipped (OTel exporters ``none``).
"""

from __future__ import annotations

import os

from reasonwire.contracts import topics


def prefix_topics(prefix: str) -> None:
    for name in dir(topics):
        value = getattr(topics, name)
        if isinstance(value, str) and value.startswith("reasoning."):
            setattr(topics, name, prefix + value)
        elif isinstance(value, tuple) and all(isinstance(v, str) and v.startswith("reasoning.") for v in value):
            setattr(topics, name, tuple(prefix + v for v in value))


class _Null:
    """Accepts any call, attribute or ``with`` and does nothing: telemetry compiled out."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def __getattr__(self, name: str) -> _Null:
        return self

    def __call__(self, *args: object, **kwargs: object) -> _Null:
        return self

    def __enter__(self) -> _Null:
        return self

    def __exit__(self, *exc: object) -> bool:
        return False


def main() -> None:
    prefix_topics(os.environ["RW_BENCH_TOPIC_PREFIX"])
    import reasonwire.workers.services.normalizer_app as worker
    from bench import phases

    phases.maybe_install()

    if os.environ.get("RW_BENCH_TELEMETRY") == "off":
        for name in ("setup_telemetry", "NormalizerTelemetry"):
            if hasattr(worker, name):
                setattr(worker, name, _Null)
    worker.run()


if __name__ == "__main__":
    main()
