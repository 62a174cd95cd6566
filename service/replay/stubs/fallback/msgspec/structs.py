"""Replay stub of ``msgspec.structs``: field introspection and copies."""

from __future__ import annotations

import typing
from typing import Any

from _replay_stubkit import module_getattr

__replay_stub__ = True
__getattr__ = module_getattr("msgspec.structs")


class FieldInfo:
    """What ``msgspec.structs.fields`` returns for one field."""

    __slots__ = ("name", "encode_name", "type", "default", "default_factory")

    def __init__(
        self,
        name: str,
        encode_name: str,
        type: Any,
        default: Any,
        default_factory: Any,
    ) -> None:
        self.name, self.encode_name, self.type = name, encode_name, type
        self.default, self.default_factory = default, default_factory

    @property
    def required(self) -> bool:
        from msgspec import NODEFAULT

        return self.default is NODEFAULT and self.default_factory is NODEFAULT

    def __repr__(self) -> str:
        return f"FieldInfo(name={self.name!r}, type={self.type!r}, default={self.default!r})"


def fields(type_or_instance: Any) -> tuple[FieldInfo, ...]:
    cls = type_or_instance if isinstance(type_or_instance, type) else type(type_or_instance)
    specs = getattr(cls, "__struct_field_specs__", None)
    if specs is None:
        raise TypeError(f"{cls!r} is not a struct type")
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception:
        hints = {}
        for klass in reversed(cls.__mro__):
            hints.update(getattr(klass, "__annotations__", {}))
    names = getattr(cls, "__struct_encode_names__", {})
    return tuple(
        FieldInfo(n, names.get(n, n), hints.get(n, Any), specs[n][1], specs[n][2])
        for n in cls.__struct_fields__
    )


def asdict(struct: Any) -> dict[str, Any]:
    return {f: getattr(struct, f) for f in struct.__struct_fields__}


def astuple(struct: Any) -> tuple[Any, ...]:
    return tuple(getattr(struct, f) for f in struct.__struct_fields__)


def replace(struct: Any, /, **changes: Any) -> Any:
    """A copy with ``changes`` applied (no ``__post_init__``, as in msgspec)."""
    cls = type(struct)
    unknown = set(changes) - set(cls.__struct_fields__)
    if unknown:
        raise TypeError(f"`{cls.__name__}` has no field '{sorted(unknown)[0]}'")
    new = object.__new__(cls)
    for f in cls.__struct_fields__:
        object.__setattr__(new, f, changes[f] if f in changes else getattr(struct, f))
    for k, v in getattr(struct, "__dict__", {}).items():
        object.__setattr__(new, k, v)
    return new


def force_setattr(struct: Any, name: str, value: Any) -> None:
    object.__setattr__(struct, name, value)
