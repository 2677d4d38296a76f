"""The distribution's layout: one import package, ``reasonwire``.

The repository keeps ``workers/`` and ``contracts/`` at the top; pyproject.toml installs them as
``reasonwire.workers`` and ``reasonwire.contracts`` through ``package-dir`` and an explicit package
list. A new sub-package missing from that list would be left out of the wheel silently, so this
test walks the folders and compares. The wheel itself is built and installed by
tests/integration/test_wheel.py.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import reasonwire

ROOT = Path(__file__).resolve().parents[2]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def _packages_on_disk() -> set[str]:
    found = set()
    for name, folder in CONFIG["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            if "__pycache__" in init.parts:
                continue
            relative = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name, *relative)))
    return found


def test_every_package_folder_is_in_the_wheel_list() -> None:
    assert set(CONFIG["packages"]) == _packages_on_disk()


def test_the_entry_point_and_public_api_live_under_reasonwire() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["reasonwire"] == "reasonwire.workers.launch:main"  # Ctrl-C quiet from the first instant
    from reasonwire import AgUiConsumer, Publisher, ReplayTarget, replay, translator_for

    assert translator_for("anthropic-messages").__class__.__name__ == "AnthropicMessagesTranslator"
    assert callable(replay) and ReplayTarget and AgUiConsumer and Publisher
    assert set(reasonwire.__all__) == {"AgUiConsumer", "Publisher", "ReplayTarget", "replay", "translator_for"}


def test_an_unknown_public_name_is_an_attribute_error() -> None:
    try:
        reasonwire.no_such_name  # noqa: B018
    except AttributeError as error:
        assert "no_such_name" in str(error)
    else:
        raise AssertionError("reasonwire.no_such_name resolved")
