"""The sans-I/O core shared by every translator: producer discipline, the translator
base (parsing, dispatch, unknown events, interruption), artefact ledger, errors."""
