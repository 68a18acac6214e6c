"""Read what a user's object holds without changing how fast it runs and without running its
code.

Why not ``vars(obj)`` / ``obj.__dict__``: since CPython 3.11 an instance keeps its attributes in
inline "values" beside the object, and the interpreter's specialized attribute loads
(``LOAD_ATTR_INSTANCE_VALUE``, PEP 659) read them there. Asking for ``__dict__`` builds a dict
from them and moves the attributes into it for good; every later ``self.x`` in that object's
methods then misses the fast path (on 3.11, 60% slower per load in a loop; a pure-Python text
dataset's ``__getitem__`` ran 11-13% slower for the rest of the process after pipecheck read its
``__dict__`` once: docs/internals.md, "Reading the user's objects"). So attributes are read here
one name at a time with the generic lookup (``object.__getattribute__``), which reads the inline
values in place, and only for names no class in the MRO defines, so that no property,
descriptor or ``__getattr__`` of the user's runs.

The names come from the code of the object's classes (``co_names`` of every function, nested
code included: the names ``self.x = ...`` stores), and the values are cross-checked against
``gc.get_referents`` (what the object holds, in the order it holds them). A value held under a
name no code of those classes mentions is returned unnamed (:data:`UNNAMED`).
"""

from __future__ import annotations

import gc
import types
from typing import Any, Iterator, Optional

UNNAMED = "<unnamed>"
"""The name given to a held value whose attribute name the classes' code does not mention."""

MAX_CODE_NAMES = 5000
"""Names gathered from the classes' code at most (a class hierarchy's code is finite; this
bounds the cost of a pathological one)."""

_MISSING = object()


def on_type(cls: type, name: str) -> bool:
    """Whether any class in ``cls``'s MRO defines ``name`` (then reading it from an instance
    could run a descriptor: such names are never read here)."""
    return any(name in vars(klass) for klass in cls.__mro__)


def own_value(obj: Any, name: str, default: Any = None) -> Any:
    """The value ``obj`` itself holds as attribute ``name`` (not its class's), or ``default``.
    Runs none of the object's code (no ``__getattr__``, ``__getattribute__`` override or
    property) and never materializes its ``__dict__``. Never raises."""
    try:
        if on_type(type(obj), name):
            return default
        return object.__getattribute__(obj, name)
    except Exception:  # AttributeError: not held; anything else: an object we cannot read
        return default


def holds(obj: Any, name: str) -> bool:
    """Whether ``obj`` itself holds a value for ``name``, also where its class defines the
    name as a plain function or value (an instance attribute shadowing a method: how
    callbacks hook a loop). ``False`` where the class defines ``name`` as any other
    descriptor (reading it could run the descriptor's code). Never raises."""
    try:
        cls = type(obj)
        for klass in cls.__mro__:
            if name in vars(klass):
                member = vars(klass)[name]
                break
        else:
            return own_value(obj, name, _MISSING) is not _MISSING
        if not isinstance(member, types.FunctionType) and hasattr(type(member), "__get__"):
            return False
        value = object.__getattribute__(obj, name)  # the instance's value first, else member
        if isinstance(value, types.MethodType):
            return not (value.__func__ is member and value.__self__ is obj)
        return value is not member
    except Exception:
        return False


def instance_attributes(obj: Any, extra_names: frozenset[str] = frozenset()
                        ) -> list[tuple[str, Any]]:
    """``(name, value)`` for what ``obj`` holds as attributes (instance attributes, then
    ``__slots__`` members), in the order it holds them. Names are those its classes' code (or
    ``extra_names``) mentions; other held values come as ``(UNNAMED, value)``. Empty for
    objects of built-in (non-heap) types and for built-in containers. Never raises."""
    cls = type(obj)
    try:
        if not cls.__flags__ & _HEAP_TYPE or isinstance(obj, (list, tuple, dict, set,
                                                               frozenset)):
            return []
        held = [value for value in gc.get_referents(obj) if value is not cls]
        named = _slot_values(obj, cls)
        dictionary = _materialized_dict(obj, held)
        if dictionary is not None:  # already a dict (made by someone else): read it as is
            named = list(dictionary.items())[:MAX_CODE_NAMES] + named
            held = [value for value in held if value is not dictionary]
        else:
            by_id: dict[int, list[str]] = {}  # one value may be held under several names
            for name in sorted(_code_names(cls) | extra_names):
                value = own_value(obj, name, _MISSING)
                if value is not _MISSING:
                    by_id.setdefault(id(value), []).append(name)
            named = [(by_id[id(value)].pop(0), value) for value in held
                     if by_id.get(id(value))] + named
        seen = {id(value) for _, value in named}
        return named + [(UNNAMED, value) for value in held if id(value) not in seen]
    except Exception:  # an object we cannot inspect holds nothing we can name
        return []


def code_names(cls: type) -> frozenset[str]:
    """The attribute and global names the code of ``cls`` and its bases mentions (at most
    :data:`MAX_CODE_NAMES`)."""
    try:
        return _code_names(cls)
    except Exception:
        return frozenset()


_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: classes made by a class statement or type()


def _code_names(cls: type) -> frozenset[str]:
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass is object:
            continue
        for member in vars(klass).values():
            for code in _codes(member):
                names.update(code.co_names)
                if len(names) >= MAX_CODE_NAMES:
                    return frozenset(names)
    return frozenset(names)


def _codes(member: Any) -> Iterator[types.CodeType]:
    """The code objects of a class member (a function, staticmethod, classmethod or
    property's accessors) and every code nested in them (comprehensions, closures)."""
    if isinstance(member, (staticmethod, classmethod)):
        member = member.__func__
    functions = [member.fget, member.fset, member.fdel] if isinstance(member, property) \
        else [member]
    stack = [f.__code__ for f in functions if isinstance(f, types.FunctionType)]
    while stack:
        code = stack.pop()
        yield code
        stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))


def _slot_values(obj: Any, cls: type) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for klass in cls.__mro__:
        for name, member in vars(klass).items():
            if isinstance(member, types.MemberDescriptorType) and name != "__weakref__":
                try:
                    out.append((name, member.__get__(obj, cls)))
                except AttributeError:  # an empty slot
                    pass
    return out


def _materialized_dict(obj: Any, held: list[Any]) -> Optional[dict]:
    """The object's ``__dict__`` when it already exists (it is then among the referents, and
    each of its string keys reads back as its value), else ``None``."""
    for value in held:
        if type(value) is dict and value and all(
                isinstance(key, str) and own_value(obj, key, _MISSING) is item
                for key, item in value.items()):
            return value
    return None
