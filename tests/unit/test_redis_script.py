"""The store's one-server write path: ops → one script call (reasonwire.workers.io.redis_script).

The script replaces a ``MULTI``/``EXEC`` pipeline on the hot path; what it writes must be
exactly what the pipeline wrote (R-store layout unchanged), so every op form the store uses
is translated here word for word, and anything else is refused rather than guessed.
"""

from __future__ import annotations

import hashlib

import hiredis
import pytest

from reasonwire.workers.io.redis_script import MAX_FIELDS_PER_CALL, READ_HASHES, WRITE_OPS, ScriptError, ServerScript, op_words, read_call, write_call
from reasonwire.workers.io.redis_slots import Op


def test_every_op_form_the_store_writes_becomes_its_command_words() -> None:
    ops = [
        Op("set", ("a:1", b"{}"), {"ex": 60}),
        Op("rpush", ("idx", "slot#0")),
        Op("expire", ("idx", 60)),
        Op("hset", ("j:run",), {"mapping": {"0": b"x", "1": b"y"}}),
        Op("sadd", ("runs", "run")),
        Op("delete", ("j:run",)),
        Op("set", ("ended", b"3:17")),
    ]
    keys, words = op_words(ops)
    assert keys == ["a:1", "idx", "idx", "j:run", "runs", "j:run", "ended"]
    assert words == [
        "SET", 3, b"{}", "EX", 60,
        "RPUSH", 1, "slot#0",
        "EXPIRE", 1, 60,
        "HSET", 4, "0", b"x", "1", b"y",
        "SADD", 1, "run",
        "DEL", 0,
        "SET", 1, b"3:17",
    ]  # fmt: skip


def test_a_big_hset_is_split_below_luas_unpack_limit_and_keeps_every_field() -> None:
    mapping = {str(i): b"v%d" % i for i in range(2 * MAX_FIELDS_PER_CALL + 5)}
    keys, words = op_words([Op("hset", ("j",), {"mapping": mapping})])
    assert keys == ["j", "j", "j"]
    counts, fields, at = [], {}, 0
    while at < len(words):
        assert words[at] == "HSET"
        n = words[at + 1]
        counts.append(n)
        chunk = words[at + 2 : at + 2 + n]
        fields.update(zip(chunk[::2], chunk[1::2], strict=True))
        at += 2 + n
    assert counts == [2 * MAX_FIELDS_PER_CALL, 2 * MAX_FIELDS_PER_CALL, 10]
    assert fields == mapping


@pytest.mark.parametrize(
    "op",
    [
        Op("delete", ("a", "b")),  # several keys: the script's op has one
        Op("set", ("k", b"v"), {"nx": True}),
        Op("hset", ("k", "f", b"v")),
        Op("incr", ("k",)),
    ],
)
def test_an_op_the_script_cannot_express_is_refused_not_guessed(op: Op) -> None:
    with pytest.raises(ScriptError):
        op_words([op])


def test_the_call_names_the_script_by_its_sha_and_puts_the_epoch_first() -> None:
    script = ServerScript(redis=None, source=WRITE_OPS)  # type: ignore[arg-type]  # packing needs no connection
    assert script.sha == hashlib.sha1(WRITE_OPS.encode()).hexdigest()
    packed = script.pack(*write_call([Op("expire", ("k", 5))], "rw:v1:epoch", "e1"))
    assert packed == hiredis.pack_command(("EVALSHA", script.sha, 2, "rw:v1:epoch", "k", "e1", "", 0, 0, "EXPIRE", 1, 5))
    unchecked = script.pack(*write_call([Op("expire", ("k", 5))], "rw:v1:epoch", None, witness=7))
    assert unchecked == hiredis.pack_command(("EVALSHA", script.sha, 2, "rw:v1:epoch", "k", "", "", 0, 0, "EXPIRE", 1, 5))
    reads = ServerScript(redis=None, source=READ_HASHES)  # type: ignore[arg-type]
    assert reads.pack(*read_call([("j:a", "e:a"), ("j:b", "e:b")], "ep", "e1", witness=7)) == hiredis.pack_command(
        ("EVALSHA", reads.sha, 5, "ep", "j:a", "e:a", "j:b", "e:b", "e1", 7)
    )


def test_fences_come_before_the_ops() -> None:
    """Each fence is (journal, ended marker) in KEYS and (expected, new head) in ARGV, before the ops."""
    script = ServerScript(redis=None, source=WRITE_OPS)  # type: ignore[arg-type]
    packed = script.pack(*write_call([Op("expire", ("k", 5))], "ep", "e1", witness=9, fences=[("j:a", "e:a", "", "1.t")], journal_ttl_s=60))
    assert packed == hiredis.pack_command(("EVALSHA", script.sha, 4, "ep", "j:a", "e:a", "k", "e1", 9, 1, 60, "", "1.t", "EXPIRE", 1, 5))
