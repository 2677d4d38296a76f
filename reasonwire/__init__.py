"""reasonwire: provider reasoning streams → AG-UI 1.0 events, opaque reasoning state kept byte
for byte and given back on the next turn.

The public library API, importable as ``from reasonwire import …``:

* :func:`translator_for` — the sans-I/O translator of one provider grammar (feed raw events,
  get AG-UI events and artefact records);
* :func:`replay` and :class:`ReplayTarget` — the provider-native request fragment for the
  next turn, from the AG-UI history a client holds and the stored artefacts;
* :class:`AgUiConsumer` — folds AG-UI events into the message history a client holds;
* :class:`Publisher` — the ingress client: one ``async with publisher.run(...)`` per run.

The implementation lives in ``reasonwire.workers`` (runtime) and ``reasonwire.contracts``
(every shape that crosses a process boundary). In the repository they are the top-level
folders ``workers/`` and ``contracts/`` (linked here as ``reasonwire/workers`` and
``reasonwire/contracts``); pyproject.toml installs them under this package so a wheel puts one
import name, ``reasonwire``, in site-packages.

Names are imported on first use (PEP 562), so ``import reasonwire`` stays cheap: the
ingress client pulls in aiokafka, the translators do not.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

_SOURCE_TREE = Path(__file__).resolve().parent.parent
if (_SOURCE_TREE / "pyproject.toml").is_file() and (_SOURCE_TREE / "workers" / "cli.py").is_file():
    # Run from a checkout: ``reasonwire/workers`` and ``reasonwire/contracts`` are symbolic links
    # to the top-level folders, so ``reasonwire.workers.x`` is found beside this file (by the
    # import system and by static tools alike) in whichever checkout or worktree runs. The
    # compiled build of the hot path (workers/ops/native.py), when built and current, is
    # installed here, before any reasonwire module is imported, so each is the compiled one or
    # none is.
    from reasonwire.workers.ops.native import install as _install_native

    _install_native()

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from reasonwire.workers.replay.consumer import AgUiConsumer
    from reasonwire.workers.services.ingress.publisher import Publisher
    from reasonwire.workers.replay import ReplayTarget, replay
    from reasonwire.workers.translators import translator_for

_PUBLIC: dict[str, str] = {
    "translator_for": "reasonwire.workers.translators",
    "replay": "reasonwire.workers.replay",
    "ReplayTarget": "reasonwire.workers.replay",
    "AgUiConsumer": "reasonwire.workers.replay.consumer",
    "Publisher": "reasonwire.workers.services.ingress.publisher",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    """Import a public name from its module the first time it is asked for."""
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'reasonwire' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
