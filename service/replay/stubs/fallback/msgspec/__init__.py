"""Replay stub of ``msgspec`` (pure Python), faithful enough for SGLang 0.5.23's ServerArgs.

SGLang 0.5.23 builds ``ServerArgs`` and its runtime context from
``msgspec.Struct`` classes, so the parts of ``Struct`` that change behaviour
are emulated: a ``StructMeta`` metaclass turns annotations into slots (no
``__dict__`` unless ``dict=True``, so a typo'd attribute raises as in
msgspec), keyword-only fields go last, ``frozen`` refuses writes,
``__post_init__`` runs after ``__init__``, empty mutable defaults are copied,
and ``__struct_fields__``/``__struct_config__``/``structs.fields()`` answer as
msgspec's do. Encoding (json/msgpack) is approximated with ``json``/``pickle``.
"""

from __future__ import annotations

import enum
import typing
from typing import Any

from _replay_stubkit import VERSIONS, module_getattr

__version__ = VERSIONS["msgspec"]
__replay_stub__ = True
__getattr__ = module_getattr("msgspec")


class _NoDefault:
    _inst: _NoDefault | None = None

    def __new__(cls) -> _NoDefault:
        if cls._inst is None:
            cls._inst = super().__new__(cls)
        return cls._inst

    def __repr__(self) -> str:
        return "NODEFAULT"

    def __bool__(self) -> bool:
        return False


class UnsetType:
    _inst: UnsetType | None = None

    def __new__(cls) -> UnsetType:
        if cls._inst is None:
            cls._inst = super().__new__(cls)
        return cls._inst

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


NODEFAULT: Any = _NoDefault()
UNSET: Any = UnsetType()


class MsgspecError(Exception):
    pass


class ValidationError(MsgspecError, ValueError):
    pass


class DecodeError(MsgspecError, ValueError):
    pass


class EncodeError(MsgspecError, ValueError):
    pass


class Meta:
    """``Annotated[int, Meta(ge=0)]``: constraints are recorded, not enforced."""

    def __init__(self, **constraints: Any) -> None:
        self.__dict__.update(constraints)


class _Field:
    __slots__ = ("default", "default_factory", "name")

    def __init__(self, default: Any, default_factory: Any, name: str | None) -> None:
        self.default, self.default_factory, self.name = default, default_factory, name


def field(
    *, default: Any = NODEFAULT, default_factory: Any = NODEFAULT, name: str | None = None
) -> Any:
    """``msgspec.field(default=..., default_factory=..., name=...)``."""
    if default is not NODEFAULT and default_factory is not NODEFAULT:
        raise TypeError("Cannot set both `default` and `default_factory`")
    return _Field(default, default_factory, name)


_CONFIG_KEYS = (
    "frozen",
    "eq",
    "order",
    "kw_only",
    "omit_defaults",
    "forbid_unknown_fields",
    "array_like",
    "gc",
    "weakref",
    "dict",
    "cache_hash",
    "tag",
    "tag_field",
    "rename",
    "repr_omit_defaults",
)
_EMPTY_FACTORIES = {list: list, dict: dict, set: set, bytearray: bytearray}


class StructConfig:
    """``cls.__struct_config__``."""

    def __init__(self, **options: Any) -> None:
        self.frozen = bool(options.get("frozen", False))
        self.eq = bool(options.get("eq", True))
        self.order = bool(options.get("order", False))
        self.kw_only = bool(options.get("kw_only", False))
        self.omit_defaults = bool(options.get("omit_defaults", False))
        self.forbid_unknown_fields = bool(options.get("forbid_unknown_fields", False))
        self.array_like = bool(options.get("array_like", False))
        self.gc = bool(options.get("gc", True))
        self.weakref = bool(options.get("weakref", False))
        self.dict = bool(options.get("dict", False))
        self.cache_hash = bool(options.get("cache_hash", False))
        self.tag = options.get("tag")
        self.tag_field = options.get("tag_field")
        self.rename = options.get("rename")
        self.repr_omit_defaults = bool(options.get("repr_omit_defaults", False))

    def as_options(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in _CONFIG_KEYS}


def _is_classvar(annotation: Any) -> bool:
    if isinstance(annotation, str):
        return annotation.startswith(("ClassVar", "typing.ClassVar", "Final", "typing.Final"))
    return typing.get_origin(annotation) in (typing.ClassVar, typing.Final) or annotation in (
        typing.ClassVar,
        typing.Final,
    )


class StructMeta(type):
    """Builds a struct class: slots for new fields, field order, defaults and config."""

    def __new__(
        mcs, name: str, bases: tuple[type, ...], ns: dict[str, Any], **options: Any
    ) -> StructMeta:
        unknown = set(options) - set(_CONFIG_KEYS)
        if unknown:
            raise TypeError(
                f"__init_subclass__() got unexpected keyword argument(s) {sorted(unknown)}"
            )
        base_structs = [b for b in bases if isinstance(b, StructMeta)]
        inherited: dict[str, Any] = {}
        fields: dict[str, tuple[bool, Any, Any]] = {}  # name -> (kw_only, default, factory)
        renamed: dict[str, str] = {}
        for base in reversed(base_structs):
            inherited.update(base.__struct_config__.as_options())
            for fname in base.__struct_fields__:
                fields[fname] = base.__struct_field_specs__[fname]
            renamed.update(getattr(base, "__struct_encode_names__", {}))
        inherited.pop("kw_only", None)  # applies to the fields a class defines, not inherited
        inherited.update(options)
        config = StructConfig(**inherited)
        annotations = ns.get("__annotations__", {})
        own_new: list[str] = []
        for fname, ann in annotations.items():
            if _is_classvar(ann):
                continue
            default: Any = NODEFAULT
            factory: Any = NODEFAULT
            if fname in ns:
                value = ns.pop(fname)
                if isinstance(value, _Field):
                    default, factory = value.default, value.default_factory
                    if value.name:
                        renamed[fname] = value.name
                elif type(value) in _EMPTY_FACTORIES and not value:
                    factory = _EMPTY_FACTORIES[type(value)]
                else:
                    default = value
            elif fname in fields:  # redeclared without a default: keeps the inherited one
                _, default, factory = fields[fname]
            if fname not in fields:
                own_new.append(fname)
            fields[fname] = (config.kw_only, default, factory)
        has_dict = any(
            "__dict__" in getattr(b, "__slots__", ())
            or getattr(getattr(b, "__struct_config__", None), "dict", False)
            for b in base_structs
        )
        slots = list(own_new)
        if config.dict and not has_dict:
            slots.append("__dict__")
        if config.weakref and not any(getattr(b, "__weakrefoffset__", 0) for b in bases):
            slots.append("__weakref__")
        ns.pop("__dict__", None)
        ns.pop("__weakref__", None)
        ns["__slots__"] = tuple(slots)
        positional = [f for f, spec in fields.items() if not spec[0]]
        keyword = [f for f, spec in fields.items() if spec[0]]
        order = tuple(positional + keyword)
        ns["__struct_fields__"] = order
        ns["__struct_config__"] = config
        ns["__struct_field_specs__"] = {f: fields[f] for f in order}
        ns["__struct_encode_names__"] = renamed
        ns["__match_args__"] = tuple(positional)
        ns["__struct_defaults__"] = tuple(
            fields[f][1] if fields[f][2] is NODEFAULT else _Factory(fields[f][2])
            for f in order
            if fields[f][1] is not NODEFAULT or fields[f][2] is not NODEFAULT
        )
        if config.frozen and "__hash__" not in ns:
            ns["__hash__"] = _frozen_hash
        elif config.eq and "__eq__" not in ns and "__hash__" not in ns:
            ns["__hash__"] = None
        return super().__new__(mcs, name, bases, ns)

    def __init__(
        cls, name: str, bases: tuple[type, ...], ns: dict[str, Any], **options: Any
    ) -> None:
        super().__init__(name, bases, ns)


class _Factory:
    def __init__(self, factory: Any) -> None:
        self.factory = factory

    def __repr__(self) -> str:
        return f"msgspec._core.Factory({self.factory!r})"


def _frozen_hash(self: Any) -> int:
    return hash((type(self), *(getattr(self, f) for f in self.__struct_fields__)))


class Struct(metaclass=StructMeta):
    """Base of every struct; see the module docstring for what is emulated."""

    __slots__ = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        cls = type(self)
        order = cls.__struct_fields__
        specs = cls.__struct_field_specs__
        positional = cls.__match_args__
        if len(args) > len(positional):
            raise TypeError(f"Extra positional arguments provided to {cls.__name__}")
        values = dict(zip(positional, args, strict=False))
        for key, value in kwargs.items():
            if key not in specs:
                raise TypeError(f"Unexpected keyword argument '{key}'")
            if key in values:
                raise TypeError(f"Argument '{key}' given by name and position")
            values[key] = value
        for fname in order:
            if fname in values:
                value = values[fname]
            else:
                _, default, factory = specs[fname]
                if factory is not NODEFAULT:
                    value = factory()
                elif default is not NODEFAULT:
                    value = default
                else:
                    raise TypeError(f"Missing required argument '{fname}'")
            object.__setattr__(self, fname, value)
        post = getattr(self, "__post_init__", None)
        if post is not None:
            post()

    def __setattr__(self, name: str, value: Any) -> None:
        if type(self).__struct_config__.frozen:
            raise AttributeError(f"immutable type: '{type(self).__name__}'")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        if type(self).__struct_config__.frozen:
            raise AttributeError(f"immutable type: '{type(self).__name__}'")
        object.__delattr__(self, name)

    def __eq__(self, other: Any) -> Any:
        if type(self) is not type(other):
            return NotImplemented
        return all(
            getattr(self, f, NODEFAULT) == getattr(other, f, NODEFAULT)
            for f in self.__struct_fields__
        )

    def __repr__(self) -> str:
        parts = ", ".join(f"{f}={getattr(self, f, '<unset>')!r}" for f in self.__struct_fields__)
        return f"{type(self).__name__}({parts})"

    def __copy__(self) -> Any:
        new = object.__new__(type(self))
        for f in self.__struct_fields__:
            object.__setattr__(new, f, getattr(self, f))
        if type(self).__struct_config__.dict or hasattr(self, "__dict__"):
            for k, v in getattr(self, "__dict__", {}).items():
                object.__setattr__(new, k, v)
        return new

    def __reduce__(self) -> Any:
        return (
            _rebuild,
            (
                type(self),
                {f: getattr(self, f) for f in self.__struct_fields__},
                dict(getattr(self, "__dict__", {})),
            ),
        )

    def __rich_repr__(self) -> Any:
        for f in self.__struct_fields__:
            yield f, getattr(self, f)


Struct.__hash__ = None  # type: ignore[assignment]


def _rebuild(cls: type, fields: dict[str, Any], extra: dict[str, Any]) -> Any:
    new = object.__new__(cls)
    for k, v in {**fields, **extra}.items():
        object.__setattr__(new, k, v)
    return new


def defstruct(
    name: str,
    fields: Any,
    *,
    bases: tuple[type, ...] | None = None,
    module: str | None = None,
    namespace: dict[str, Any] | None = None,
    **options: Any,
) -> type:
    """``msgspec.defstruct(name, [name | (name, type) | (name, type, default)], ...)``."""
    ns: dict[str, Any] = dict(namespace or {})
    annotations: dict[str, Any] = {}
    for spec in fields:
        if isinstance(spec, str):
            fname, ann, default = spec, Any, NODEFAULT
        elif len(spec) == 2:
            (fname, ann), default = spec, NODEFAULT
        else:
            fname, ann, default = spec
        ns.pop(fname, None)
        annotations[fname] = ann
        if default is not NODEFAULT:
            ns[fname] = default
    ns["__annotations__"] = annotations
    if module is not None:
        ns["__module__"] = module
    ns.setdefault("__module__", "types")
    ns.setdefault("__qualname__", name)
    return StructMeta(name, tuple(bases or (Struct,)), ns, **options)


# ---------------------------------------------------------------- conversions


def to_builtins(
    obj: Any,
    *,
    builtin_types: Any = None,
    str_keys: bool = False,
    enc_hook: Any = None,
    order: Any = None,
) -> Any:
    if isinstance(obj, Struct):
        return {
            type(obj).__struct_encode_names__.get(f, f): to_builtins(getattr(obj, f))
            for f in obj.__struct_fields__
        }
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, dict):
        return {(str(k) if str_keys else k): to_builtins(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_builtins(v) for v in obj]
    if obj is UNSET:
        return None
    if enc_hook is not None and not isinstance(obj, (str, int, float, bool, type(None), bytes)):
        return to_builtins(enc_hook(obj))
    return obj


def convert(
    obj: Any,
    type: Any,
    *,
    strict: bool = True,
    from_attributes: bool = False,
    dec_hook: Any = None,
    builtin_types: Any = None,
    str_keys: bool = False,
) -> Any:
    target = typing.get_origin(type) or type
    if isinstance(target, StructMeta) and isinstance(obj, dict):
        try:
            return target(**obj)
        except TypeError as exc:
            raise ValidationError(str(exc)) from exc
    if isinstance(target, StructMeta) and from_attributes:
        return target(**{f: getattr(obj, f) for f in target.__struct_fields__ if hasattr(obj, f)})
    return obj


from . import json, msgpack, structs  # noqa: E402,F401 - submodules after the core names
from .structs import force_setattr  # noqa: E402,F401
