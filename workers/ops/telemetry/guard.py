"""The content guards: what leaves the process as telemetry or log output carries no content (P8).

Theory of operation
-------------------
Care is not enough: a third-party library records an exception's message on a
span, logs a failed command with its arguments, or a future change adds an
attribute. So every exit is guarded by code, whatever produced the data:

* **Spans** — :class:`GuardedSpanProcessor` wraps each exporting processor and
  hands it a sanitized copy of every ended span: attribute keys outside the
  allowlist (:data:`reasonwire.workers.ops.telemetry.vocabulary.ATTRIBUTES`) are dropped, and
  so is any value that breaks its key's rule (fixed vocabulary, expected shape,
  type) or contains registered content; span events other than ours are
  dropped — ``exception`` events (message and stack trace) included; a status
  description survives only if it looks like an exception type name; a span
  name outside the vocabulary is replaced. The live span is never exported.
* **Metrics** — an SDK View keeps only the allowlisted attribute keys on every
  instrument (third-party ones included); :class:`GuardedCounter` also checks
  the values of our own data points.
* **Logs** — :func:`install_log_guard` puts a :class:`RedactingLogFilter` on
  the root logger's handlers and on the handlers of every logger that exists,
  and wraps the log-record factory so records of loggers that do not propagate
  to the root (FastStream's access logger has its own handler) are redacted
  when they are created. The filter logs ``bytes`` arguments as their size
  (they are payloads: aiokafka logs every record it sends, at DEBUG) and
  replaces any stretch of registered content
  (:class:`reasonwire.workers.ops.telemetry.registry.OpaqueRegistry`) in the message (after
  ``%`` formatting, so the other ``args`` are covered), the exception text
  (formatted once here, redacted, and the raw ``exc_info`` dropped so no
  handler formats it again), the stack info and string extras.

What the guards cannot see is listed in docs/telemetry.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from opentelemetry.context import Context
from opentelemetry.metrics import Counter, Histogram, NoOpCounter, NoOpHistogram
from opentelemetry.sdk.trace import Event, ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import Link, Status

from reasonwire.workers.ops.telemetry.registry import OpaqueRegistry
from reasonwire.workers.ops.telemetry.vocabulary import (
    ATTRIBUTES,
    EVENT_NAMES,
    METRIC_ATTRIBUTES,
    RENAMED_SPAN,
    RW_GUARD_DROPPED,
    SPAN_NAMES,
    STATUS_DESCRIPTION,
    Rule,
)

DropReport = Callable[[str, int], None]
"""Called with a guard signal name and how many items the guard removed."""


class ContentGuard:
    """The allowlist plus the registry: decides what one attribute map may keep."""

    def __init__(self, registry: OpaqueRegistry, rules: Mapping[str, Rule] = ATTRIBUTES) -> None:
        self.registry = registry
        self.rules = rules

    def attributes(self, attributes: Mapping[str, Any] | None, keys: Iterable[str] | None = None) -> tuple[dict[str, Any], int]:
        """The admissible subset of ``attributes`` and how many were dropped."""
        kept: dict[str, Any] = {}
        allowed = None if keys is None else frozenset(keys)
        for key, value in (attributes or {}).items():
            rule = self.rules.get(key)
            if rule is None or (allowed is not None and key not in allowed):
                continue
            checked = rule.check(value)
            if checked is None or not (rule.closed or self.clean(checked)):
                continue
            kept[key] = checked
        return kept, len(attributes or {}) - len(kept)

    def clean(self, value: Any) -> bool:
        """True when no string in ``value`` carries registered content."""
        if isinstance(value, str):
            return not self.registry.contains(value)
        if isinstance(value, (list, tuple)):
            return all(self.clean(v) for v in value)
        return True

    def span(self, span: ReadableSpan, report: DropReport | None = None) -> ReadableSpan:
        """A copy of an ended span with nothing outside the allowlist."""
        report = report or (lambda signal, n: None)
        attributes, dropped = self.attributes(span.attributes)
        if dropped:
            report("span_attribute", dropped)
        events = []
        for event in span.events:
            if event.name not in EVENT_NAMES:
                report("span_event", 1)
                dropped += 1
                continue
            kept, lost = self.attributes(event.attributes)
            dropped += lost
            events.append(Event(event.name, kept, timestamp=event.timestamp))
        links = []
        for link in span.links:
            kept, lost = self.attributes(link.attributes)
            if lost:
                report("span_link", lost)
            links.append(Link(link.context, kept))
        name = span.name
        if name not in SPAN_NAMES:
            report("span_name", 1)
            name = RENAMED_SPAN
        status = span.status
        if status.description is not None and (
            STATUS_DESCRIPTION(status.description) is None or not self.clean(status.description)
        ):
            report("span_status", 1)
            dropped += 1
            status = Status(status.status_code)
        if dropped:
            attributes[RW_GUARD_DROPPED] = dropped
        return ReadableSpan(
            name=name,
            context=span.context,
            parent=span.parent,
            resource=span.resource,
            attributes=attributes,
            events=events,
            links=links,
            kind=span.kind,
            status=status,
            start_time=span.start_time,
            end_time=span.end_time,
            instrumentation_scope=span.instrumentation_scope,
        )


class GuardedSpanProcessor(SpanProcessor):
    """Wraps an exporting span processor: it only ever sees sanitized copies of ended spans."""

    def __init__(self, inner: SpanProcessor, guard: ContentGuard, report: DropReport | None = None) -> None:
        self.inner = inner
        self.guard = guard
        self.report = report

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """The live span is not forwarded: an exporter has nothing to do with it before it ends."""

    def on_end(self, span: ReadableSpan) -> None:
        self.inner.on_end(self.guard.span(span, self.report))

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class GuardedCounter:
    """A counter whose data points carry only allowlisted, well-formed attribute values."""

    def __init__(self, counter: Counter, guard: ContentGuard) -> None:
        self.counter = counter
        self.guard = guard
        self.live = not isinstance(counter, NoOpCounter)
        """A no-op counter (no metric reader) drops every data point: nothing to guard."""

    def add(self, amount: int, attributes: Mapping[str, Any] | None = None) -> None:
        if amount and self.live:
            kept, _ = self.guard.attributes(attributes, METRIC_ATTRIBUTES)
            self.counter.add(amount, kept)


class GuardedHistogram:
    """A histogram whose data points carry only allowlisted, well-formed attribute values."""

    def __init__(self, histogram: Histogram, guard: ContentGuard) -> None:
        self.histogram = histogram
        self.guard = guard
        self.live = not isinstance(histogram, NoOpHistogram)

    def record(self, amount: float, attributes: Mapping[str, Any] | None = None) -> None:
        if self.live:
            kept = self.guard.attributes(attributes, METRIC_ATTRIBUTES)[0] if attributes else None
            self.histogram.record(amount, kept)


# -- logs -------------------------------------------------------------------------------

_STANDARD_RECORD_FIELDS = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


def redact_record(record: logging.LogRecord, registry: OpaqueRegistry) -> bool:
    """Redact registered content from a log record in place; True if anything was removed."""
    changed = _payload_args(record)
    if not len(registry):
        return changed
    try:
        message = record.getMessage()
    except Exception:  # a broken format string is the handler's to report, with our msg
        message = str(record.msg)
        record.args = None
    if registry.contains(message):
        record.msg, record.args, changed = registry.redact(message), None, True
    if record.exc_info and not record.exc_text:
        record.exc_text = logging.Formatter().formatException(record.exc_info)
    if record.exc_text and registry.contains(record.exc_text):
        record.exc_text, changed = registry.redact(record.exc_text), True
        record.exc_info = None  # handlers that format exc_info themselves must not get the original
    if record.stack_info and registry.contains(record.stack_info):
        record.stack_info, changed = registry.redact(record.stack_info), True
    for name, value in list(vars(record).items()):
        if name not in _STANDARD_RECORD_FIELDS and isinstance(value, str) and registry.contains(value):
            setattr(record, name, registry.redact(value))
            changed = True
    return changed


def _payload_args(record: logging.LogRecord) -> bool:
    """Bytes passed as log arguments are payloads (aiokafka logs every record it sends at DEBUG,
    value included): they are logged as their size only, whatever they contain."""
    args = record.args
    if isinstance(args, tuple) and any(isinstance(a, _PAYLOADS) for a in args):
        record.args = tuple(_sized(a) for a in args)
        return True
    if isinstance(args, Mapping) and any(isinstance(a, _PAYLOADS) for a in args.values()):
        record.args = {k: _sized(a) for k, a in args.items()}
        return True
    return False


_PAYLOADS = (bytes, bytearray, memoryview)


def _sized(arg: Any) -> Any:
    return f"<{len(arg)} bytes>" if isinstance(arg, _PAYLOADS) else arg


class RedactingLogFilter(logging.Filter):
    """A handler filter: never drops a line, removes registered content from it."""

    def __init__(self, registry: OpaqueRegistry, report: DropReport | None = None) -> None:
        super().__init__()
        self.registry = registry
        self.report = report

    def filter(self, record: logging.LogRecord) -> bool:
        if redact_record(record, self.registry) and self.report is not None:
            self.report("log", 1)
        return True


class LogGuard:
    """The installed log guard; :meth:`uninstall` takes it off again (tests, shutdown)."""

    def __init__(self, registry: OpaqueRegistry, report: DropReport | None = None) -> None:
        self.filter = RedactingLogFilter(registry, report)
        self._handlers: list[logging.Handler] = []
        self._previous_factory = logging.getLogRecordFactory()
        self._active = True
        previous, log_filter = self._previous_factory, self.filter

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            if self._active:
                log_filter.filter(record)
            return record

        self._factory = factory

    def install(self) -> LogGuard:
        logging.setLogRecordFactory(self._factory)
        self.cover(self._all_handlers())
        return self

    def cover(self, handlers: Sequence[logging.Handler]) -> None:
        """Add the filter to more handlers (e.g. ones created after :meth:`install`)."""
        for handler in handlers:
            if self.filter not in handler.filters:
                handler.addFilter(self.filter)
                self._handlers.append(handler)

    def uninstall(self) -> None:
        self._active = False
        if logging.getLogRecordFactory() is self._factory:
            logging.setLogRecordFactory(self._previous_factory)
        for handler in self._handlers:
            handler.removeFilter(self.filter)
        self._handlers.clear()

    @staticmethod
    def _all_handlers() -> list[logging.Handler]:
        loggers = [logging.getLogger()] + [
            lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)
        ]
        return [h for lg in loggers for h in lg.handlers]
