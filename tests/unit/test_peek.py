"""pipecheck._peek reads what a user's object holds without materializing its ``__dict__``
(which would slow its attribute loads for good on CPython 3.11-3.12) and without running its
code."""

from __future__ import annotations

import gc

from pipecheck._peek import UNNAMED, holds, instance_attributes, own_value

CALLS: list[str] = []


class Holder:
    """Attributes set in its own code, a property and a ``__getattr__`` that record calls."""

    def __init__(self) -> None:
        self.samples = list(range(5))
        self.labels = {i: str(i) for i in range(3)}
        self.count = 7

    @property
    def expensive(self) -> int:
        CALLS.append("property")
        return 1

    def __getattr__(self, name: str) -> int:
        CALLS.append(f"getattr {name}")
        return 0


class Slotted:
    __slots__ = ("table", "empty")

    def __init__(self) -> None:
        self.table = [1, 2, 3]


def _storage(obj: object) -> list[type]:
    """What the object holds, as the garbage collector sees it: the attribute values while
    they are inline, a single ``dict`` once ``__dict__`` was materialized."""
    return [type(value) for value in gc.get_referents(obj) if value is not type(obj)]


def test_attributes_come_named_in_order_without_materializing_or_running_user_code():
    CALLS.clear()
    holder = Holder()
    before = _storage(holder)
    found = instance_attributes(holder)
    assert [name for name, _ in found] == ["samples", "labels", "count"]
    assert found[0][1] is holder.samples
    assert _storage(holder) == before  # still inline: nothing was materialized
    assert CALLS == []


def test_a_value_set_from_outside_the_class_code_comes_unnamed():
    holder = Holder()
    holder.zzz_external = [0] * 10
    names = [name for name, _ in instance_attributes(holder)]
    assert names == ["samples", "labels", "count", UNNAMED]
    extra = instance_attributes(holder, frozenset({"zzz_external"}))
    assert [name for name, _ in extra][-1] == "zzz_external"


def test_one_value_held_under_two_names_comes_once_per_name():
    holder = Holder()
    holder.count = holder.samples  # the same list under two names the code mentions
    found = instance_attributes(holder)
    assert sorted(name for name, _ in found) == ["count", "labels", "samples"]
    assert all(value is holder.samples for name, value in found if name != "labels")


def test_an_already_materialized_dict_is_read_as_it_is():
    holder = Holder()
    holder.zzz_external = 3
    vars(holder)  # materialized by the user, not by pipecheck
    found = dict(instance_attributes(holder))
    assert found["zzz_external"] == 3 and found["samples"] is holder.samples
    assert UNNAMED not in found


def test_slots_are_read_and_empty_slots_skipped():
    assert instance_attributes(Slotted()) == [("table", [1, 2, 3])]


def test_built_in_objects_hold_nothing_to_name():
    assert instance_attributes([1, 2]) == [] and instance_attributes(object()) == []
    assert instance_attributes({"a": [1]}) == []


def test_own_value_never_reads_class_members_nor_calls_hooks():
    CALLS.clear()
    holder = Holder()
    assert own_value(holder, "count") == 7
    assert own_value(holder, "expensive", "x") == "x"  # a property: never run
    assert own_value(holder, "missing", "x") == "x"  # never reaches __getattr__
    assert own_value(holder, "__init__", "x") == "x"
    assert CALLS == []


def test_holds_tells_an_instance_attribute_shadowing_a_method():
    CALLS.clear()
    holder = Holder()
    assert not holds(holder, "__init__")
    assert holds(holder, "count") and not holds(holder, "missing")
    holder.__init__ = lambda: None  # a callback's hook on the instance
    assert holds(holder, "__init__")
    assert not holds(holder, "expensive")  # a property: never run, never "held"
    assert CALLS == []
