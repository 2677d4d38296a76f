"""Every shape that crosses a reasonwire process boundary, versioned with its topic.

One module per concern: grammar names (:mod:`contracts.grammars`), topic names
(:mod:`contracts.topics`), the raw-record envelope (:mod:`contracts.envelope`),
the artefact record (:mod:`contracts.artefacts`), the usage record
(:mod:`contracts.usage`), the Redis key layout (:mod:`contracts.store`), the
retention policy (:mod:`contracts.policy`), replay requests and replies
(:mod:`contracts.replay`). Normalized events are *not* declared here: they are the
AG-UI 1.0 models of the ``ag-ui-protocol`` package, imported where used.
"""
