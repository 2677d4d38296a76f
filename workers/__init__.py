"""reasonwire's runtime: the sans-I/O translators (``reasonwire.workers.core``, ``reasonwire.workers.translators``)
and the thin adapters around them (CLI, FastStream workers, store, telemetry)."""
