"""The state database refuses what it cannot trust, and migrates per component."""

import os
import sqlite3

import pytest

from runtime.state.db import FILE_NAME, Component, StateDB, StateError, default_state_dir

V1 = Component("things", ["CREATE TABLE things (id TEXT PRIMARY KEY)"])
V2 = Component(
    "things",
    [
        *V1.migrations,
        "ALTER TABLE things ADD COLUMN size INTEGER; CREATE INDEX things_size ON things (size)",
    ],
)


def test_migrations_run_once_and_in_order(tmp_path):
    db = StateDB.open(str(tmp_path), [V1])
    db.conn.execute("INSERT INTO things (id) VALUES ('a')")
    db.close()
    db = StateDB.open(str(tmp_path), [V2])
    db.conn.execute("INSERT INTO things (id, size) VALUES ('b', 3)")
    assert db.conn.execute("SELECT count(*) FROM things").fetchone() == (2,)
    assert db.conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    db.close()
    # Opening again applies nothing twice.
    StateDB.open(str(tmp_path), [V2]).close()


def test_a_newer_schema_stops_with_the_path(tmp_path):
    StateDB.open(str(tmp_path), [V2]).close()
    with pytest.raises(StateError, match=f"{tmp_path}.*newer toolrt"):
        StateDB.open(str(tmp_path), [V1])


def test_a_file_that_is_not_a_database_is_never_reset(tmp_path):
    path = tmp_path / FILE_NAME
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StateError, match=str(path)):
        StateDB.open(str(tmp_path), [V1])
    assert path.read_bytes() == b"this is not sqlite" * 100


def test_a_failed_migration_leaves_the_old_version(tmp_path):
    StateDB.open(str(tmp_path), [V1]).close()
    broken = Component("things", [*V1.migrations, "ALTER TABLE nowhere ADD COLUMN x"])
    with pytest.raises(StateError, match="migration things 2"):
        StateDB.open(str(tmp_path), [broken])
    conn = sqlite3.connect(tmp_path / FILE_NAME)
    assert conn.execute("SELECT version FROM schema WHERE component='things'").fetchone() == (1,)


def test_default_directory_is_per_instance(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    path = default_state_dir("a")
    assert path.endswith(os.path.join("toolrt", "a"))
    assert path != default_state_dir("b")
