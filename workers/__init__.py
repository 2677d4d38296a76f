"""reasonwire's runtime: the sans-I/O translators (``reasonwire.workers.core``, ``reasonwire.workers.translators``)
and the thin adapters around them (CLI, FastStream workers, store, telemetry).

The folders are layers. A module imports only its own folder and the ones below it, and no
modules import each other in a circle (tests/unit/test_layout.py reads every import, lazy ones
included). Bottom to top:

1. ``contracts/`` — every shape that crosses a process boundary; it knows no runtime.
2. ``core/`` — the pure machine: translator base, normalizer, delivery machine, fence, backoff.
   No I/O, clock or randomness (tests/unit/test_core_imports.py), so it is tested and simulated
   alone.
3. ``translators/`` — one per provider grammar, built on the core's translator base; pure.
4. ``replay/`` — the way back: AG-UI history and stored artefacts to a provider's request. It
   reads what the translators recorded, so it sits above them; pure, so below anything that
   touches a process or a service.
5. ``ops/`` — the process: settings, errors, logs, metrics, health, telemetry, retry, Ctrl-C.
   Every client and service reads its settings and reports through these, so they know no
   client: a setting's format is parsed here (the Kafka security settings, a cluster URL), and
   health names failures by type without reaching for the store.
6. ``io/`` — the clients of Kafka and Redis: the store and its scripts, the outbox, topic
   administration, captures. They are configured and observed by ``ops/``.
7. ``services/`` — the long-running processes and clients assembled from the above: the
   normalizer worker, the replay worker, the gateway, the ingress publisher, the start-up checks.
8. ``commands/`` — one module per CLI command: arguments and settings to a service or a tool.
9. ``cli.py`` and ``launch.py`` — the command line and the console script in front of it.

Above them all, ``reasonwire/__init__.py``: the public library API, which names modules of
several layers.
"""
