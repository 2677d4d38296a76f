"""deploy/worker.Dockerfile builds the product reproducibly: a base image pinned by digest, every
Python package from a committed lock with file hashes (pip --require-hashes), the compiled core
built in a build stage and required at run time, a HEALTHCHECK, and ``reasonwire`` as the
entrypoint the chart and compose pass their arguments to. No Docker engine here: the file and
the locks are read, not built."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "worker.Dockerfile"
LOCK = ROOT / "deploy" / "requirements.lock"
BUILD_LOCK = ROOT / "deploy" / "requirements-build.lock"
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def instructions() -> list[tuple[str, str]]:
    """(instruction, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", "\n".join(line for line in DOCKERFILE.read_text().splitlines() if not line.lstrip().startswith("#")))
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in text.splitlines() if line.strip()]


def stages() -> list[list[tuple[str, str]]]:
    """The instructions of each stage (the ARGs before the first FROM are their own list)."""
    out: list[list[tuple[str, str]]] = [[]]
    for op, args in instructions():
        if op == "FROM":
            out.append([])
        out[-1].append((op, args))
    return out


def base_images() -> list[str]:
    """Each stage's base image, with ARG defaults substituted."""
    args = dict(a.split("=", 1) for op, a in stages()[0] if op == "ARG" and "=" in a)
    return [re.sub(r"\$\{(\w+)\}", lambda m: args[m[1]], s[0][1].split()[0]) for s in stages()[1:]]


def lock_pins(path: Path) -> dict[str, tuple[str, list[str]]]:
    """Package → (pinned version, its hashes) of a ``--generate-hashes`` lock."""
    pins: dict[str, tuple[str, list[str]]] = {}
    for entry in re.sub(r"\\\n", " ", path.read_text()).splitlines():
        entry = entry.split(" #", 1)[0].strip()
        if not entry or entry.startswith("#"):
            continue
        m = re.match(r"^([A-Za-z0-9_.\-\[\]]+)==(\S+?)(?:\s*;[^-]*)?\s+(.*)$", entry)
        assert m, f"{path.name}: not an exact pin with hashes: {entry[:80]}"
        pins[canonicalize_name(m[1].split("[")[0])] = (m[2], re.findall(r"--hash=sha256:([0-9a-f]{64})", m[3]))
    return pins


def test_every_stage_starts_from_a_base_pinned_by_digest() -> None:
    images = base_images()
    assert len(images) >= 2, "a build stage and the runtime stage"
    for image in images:
        assert DIGEST.search(image), f"{image}: pin the base image by @sha256:<digest>"
    assert len(set(images)) == 1  # the compiled core is built for the interpreter that runs it


def test_every_package_comes_from_the_lock_with_its_hashes() -> None:
    """No ``pip install .`` on open ranges: each pip install reads a lock and requires hashes, or
    installs the tree itself with nothing fetched (``--no-index --no-deps``)."""
    installs = [a for stage in stages() for op, a in stage if op == "RUN" for a in a.split("&&") if re.search(r"\bpip install\b", a)]
    locked = [shlex.split(c) for c in installs if "-r" in shlex.split(c)]
    assert len(locked) == 2
    for words in locked:
        assert "--require-hashes" in words, words
        assert words[words.index("-r") + 1].startswith("/locks/requirements"), words
        assert "--no-deps" in words, words  # the lock is the whole set: nothing resolved at build time
    for command in installs:
        words = shlex.split(command)
        assert "-r" in words or {"--no-index", "--no-deps"} <= set(words), command
    copied = " ".join(a for stage in stages() for op, a in stage if op == "COPY")
    assert "deploy/requirements.lock" in copied and "deploy/requirements-build.lock" in copied


def test_the_locks_pin_every_dependency_pyproject_declares_within_its_range_with_hashes() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for lock, declared in ((LOCK, project["dependencies"]), (BUILD_LOCK, project["dependencies"] + project["optional-dependencies"]["native"])):
        pins = lock_pins(lock)
        for text in declared:
            requirement = Requirement(text)
            name = canonicalize_name(requirement.name)
            assert name in pins, f"{lock.name} lacks {name} (pyproject.toml: {text})"
            version, hashes = pins[name]
            assert requirement.specifier.contains(version, prereleases=True), f"{lock.name}: {name}=={version} is outside {text}"
        for name, (version, hashes) in pins.items():
            assert hashes, f"{lock.name}: {name}=={version} has no --hash"
    assert "hiredis" in lock_pins(LOCK)  # an extra (redis[hiredis]) is locked too


def test_the_build_lock_agrees_with_the_runtime_lock() -> None:
    """What the core is compiled against is what runs it."""
    runtime, build = lock_pins(LOCK), lock_pins(BUILD_LOCK)
    for name, (version, _) in runtime.items():
        assert build[name][0] == version, name
    assert {"mypy", "setuptools"} <= set(build)


def test_the_core_is_compiled_in_the_build_stage_and_required_at_run_time() -> None:
    build, runtime = stages()[1], stages()[-1]
    assert any(op == "RUN" and "tools/build_native.py" in a for op, a in build)
    assert not any("build_native" in a for op, a in runtime if op == "RUN")
    assert any(op == "COPY" and "--from=build" in a and "/app" in a for op, a in runtime)
    env = " ".join(a for op, a in runtime if op == "ENV")
    assert "RW_NATIVE=require" in env  # a build that cannot be used stops the start, never runs slower unnoticed
    assert not any(op == "RUN" and "apt-get install" in a for op, a in runtime)  # no compiler in the runtime image


def test_the_image_has_a_healthcheck_a_non_root_user_and_reasonwire_as_entrypoint() -> None:
    runtime = stages()[-1]
    ops = dict(runtime)
    assert "/healthz" in ops["HEALTHCHECK"] and "RW_HEALTH_PORT" in ops["HEALTHCHECK"]
    assert ops["USER"] not in ("root", "0")
    assert ops["ENTRYPOINT"] == '["reasonwire"]'  # the chart passes args only (worker normalize, topics apply, gateway)


def test_the_image_copies_every_file_the_sources_need() -> None:
    """pyproject names README.md and LICENSE; reasonwire/ links workers/ and contracts/."""
    copied = {w for stage in stages() for op, a in stage if op == "COPY" and "--from" not in a for w in a.split()[:-1]}
    for needed in ("pyproject.toml", "README.md", "LICENSE", "reasonwire", "contracts", "workers", "tools/build_native.py"):
        assert needed in copied, needed
