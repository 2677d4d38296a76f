"""reasonwire's runtime: the sans-I/O translators (``workers.core``, ``workers.translators``)
and the thin adapters around them (CLI, FastStream workers, store, telemetry)."""
