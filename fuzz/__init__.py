"""A seeded, corpus-based mutation fuzzer for the five translators.

Theory of operation
-------------------
Seeds are the in-repo fixture streams (``tests/fixtures/<grammar>/*.jsonl``).
:mod:`fuzz.mutate` derives hostile variants from them — deleted keys, wrong
types, huge and negative numbers, deep nesting, duplicated / dropped / swapped
events, lines spliced in from other grammars, invalid UTF-8, lone surrogates,
SSE event names that route a payload without a ``type``. :mod:`fuzz.oracle`
feeds each variant to a fresh translator through its public API exactly as the
worker and ``reasonwire translate`` do (``feed`` / ``finish`` / ``abort``, bytes
or ``str``, with or without SSE names), serializes every output the way the
worker does (``event_json`` / ``record_json``) and checks the result:

* no exception escapes, and the translator's safety net (``internal_error``)
  never fires — a safety-net hit is a finding, never a pass;
* every event validates against the ``ag_ui.core`` models (usage ranges
  included) and the stream passes ``ag-ui-validate`` with warnings as failures.

:mod:`fuzz.minimize` shrinks a failing case (lines by delta debugging, then the
JSON of the remaining lines) and :mod:`fuzz.campaign` runs the campaign over
all grammars (``make fuzz``). Findings are written to ``fuzz/findings/``; the
fixed ones live on as regression cases in ``tests/fixtures/fuzz/``.

A dev tool: nothing in ``workers/`` imports it.
"""
