"""The agent's records (runtime/agent/records.py) behave as the dataclasses
they replace, where the agent and daemon rely on it."""

from __future__ import annotations

from typing import ClassVar

import pytest

from runtime.agent import protocol, records


@records.record
class Base:
    KIND: ClassVar[str] = "base"
    name: str
    tags: list[str] = records.field(default_factory=list)


@records.record
class Child(Base):
    size: int = 3


@records.record(frozen=True)
class Point:
    x: int
    y: int = 0


def test_fields_defaults_and_factories():
    a, b = Child("a"), Child(name="b", size=5)
    assert records.fields(Child) == ("name", "tags", "size")
    assert (a.name, a.tags, a.size, b.size) == ("a", [], 3, 5)
    a.tags.append("x")
    assert b.tags == [] and Child("c").tags == []  # each record its own list
    assert Child.KIND == "base"


def test_equality_repr_and_replace():
    assert Child("a", ["t"], 2) == Child(name="a", tags=["t"], size=2)
    assert Child("a") != Child("b") and Child("a") != Base("a")
    assert repr(Child("a")) == "Child(name='a', tags=[], size=3)"
    changed = records.replace(Child("a"), size=9)
    assert changed == Child("a", size=9)
    with pytest.raises(TypeError, match="no field 'colour'"):
        records.replace(Child("a"), colour="red")
    with pytest.raises(TypeError):
        Child()  # name is required


def test_frozen_records_refuse_changes():
    p = Point(1)
    with pytest.raises(AttributeError):
        p.x = 2  # type: ignore[misc]
    assert records.replace(p, y=4) == Point(1, 4)


def test_protocol_messages_round_trip_as_before():
    exec_ = protocol.Exec(command="echo hi", cwd="/workspace", env={"A": "1"})
    again = protocol.from_dict(protocol.Exec, protocol.to_dict(exec_))
    assert again == exec_ and again is not exec_
