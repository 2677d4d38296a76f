"""Every shape that crosses a reasonwire process boundary, versioned with its topic.

One module per concern: grammar names (:mod:`reasonwire.contracts.grammars`), topic names
(:mod:`reasonwire.contracts.topics`), the raw-record envelope (:mod:`reasonwire.contracts.envelope`),
the artefact record (:mod:`reasonwire.contracts.artefacts`), the usage record
(:mod:`reasonwire.contracts.usage`), the Redis key layout (:mod:`reasonwire.contracts.store`), the
retention policy (:mod:`reasonwire.contracts.policy`), replay requests and replies
(:mod:`reasonwire.contracts.replay`). Normalized events are *not* declared here: they are the
AG-UI 1.0 models of the ``ag-ui-protocol`` package, imported where used.
"""
