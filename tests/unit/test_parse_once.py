"""A call's arguments are parsed once and its result encoded once, with the
journal written to disk and the audit log on (fake backend)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import orjson

from runtime import models
from runtime.agent import protocol
from runtime.client import Client
from runtime.state.db import StateDB
from runtime.state.journal_store import JOURNAL, JournalStore
from runtime.tools import validation

# In the command; its output is the command in capitals (OUTPUT, in no argument).
MARK = "parse-once-mark"
OUTPUT = MARK.upper()


def shout(request: protocol.Exec) -> Any:
    return protocol.ExecResult(exit_code=0), request.command.upper().encode()


def counted(
    counts: Counter[str], name: str, fn: Callable[..., Any], mark: str
) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if mark in str(args[0]):
            counts[name] += 1
        return fn(*args, **kwargs)

    return wrapper


def test_a_call_is_parsed_once_and_its_result_encoded_once(make_daemon, tmp_path, monkeypatch):
    running = make_daemon(
        backend="fake", state_dir=str(tmp_path / "state"), audit_log=str(tmp_path / "audit")
    )
    running.daemon.core.backend.script(shout)
    counts: Counter[str] = Counter()
    # Every JSON parse of arguments goes through load_json; every encoder
    # that could write the result again (the journal's, the audit's) is
    # counted when what it encodes holds the call's output.
    parse = counted(counts, "parse", validation.load_json, MARK)
    monkeypatch.setattr(validation, "load_json", parse)
    monkeypatch.setattr(
        models, "encode_json", counted(counts, "encode", models.encode_json, OUTPUT)
    )
    monkeypatch.setattr(json, "dumps", counted(counts, "stdlib encode", json.dumps, OUTPUT))
    monkeypatch.setattr(orjson, "dumps", counted(counts, "orjson encode", orjson.dumps, OUTPUT))
    with Client(running.target) as client, client.session() as session:
        result = session.call("shell", {"command": f"echo {MARK}"}, call_id="c1")
        assert result.ok and OUTPUT in result.output["stdout"]
        assert counts == {"parse": 1, "encode": 1, "orjson encode": 1}, counts
        # The durable journal stores the text the client was answered with.
        db = StateDB.open(str(tmp_path / "state"), [JOURNAL])
        (row,) = JournalStore(db).rows(session.id)
        db.close()
        assert row.result is not None and row.result.output == result.output
        again = session.call("shell", {"command": f"echo {MARK}"}, call_id="c1")
    # A repeat is parsed (to compare its arguments) and answered as it was.
    assert again == result and counts["encode"] == 1 and counts["parse"] == 2
    (record,) = [
        r
        for r in map(json.loads, (tmp_path / "audit").read_text().splitlines())
        if r["event"] == "call"
    ][:1]
    assert record["output_bytes"] == len(row.result.output_json.encode())
