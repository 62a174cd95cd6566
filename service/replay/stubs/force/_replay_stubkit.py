"""Stand-ins for packages a CPU-only replay cannot import (child side, stdlib only).

Loaded inside the replay subprocess before SGLang. Two kinds of stub:

* *file stubs*: hand-written modules next to this file (``force/triton/...``)
  or in ``../fallback/`` (``psutil``, ``msgspec``...), for packages whose
  values SGLang actually reads while importing or validating;
* *synthetic stubs*: a :class:`StubModule` whose every attribute is a
  :class:`StubAttr`, good enough for ``from x import y`` and decorators.

:class:`StubFinder` serves both. The *force* finder sits first on
``sys.meta_path`` and always wins (GPU-only packages: even if installed they
cannot run here); the *fallback* finder sits last and only answers when the
real package is missing. Everything a stub creates is marked so that the
child's classifier can tell a stub failure from SGLang's own verdict:
modules carry ``__replay_stub__``, objects are :class:`StubAttr` instances
and their messages name ``replay stub``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from collections.abc import Iterator
from typing import Any

STUB_MARK = "replay stub"
_HERE = os.path.dirname(os.path.abspath(__file__))
STUB_DIRS = (_HERE, os.path.join(os.path.dirname(_HERE), "fallback"))

#: set by the child from its config: ``"import:<module>"`` makes that stub's
#: import raise; ``"call:<name>"`` makes the named fake hardware query raise.
FORCED_FAILURE: str | None = None

#: the declared hardware profile (set by the child before SGLang is imported)
HARDWARE: dict[str, Any] = {}

#: module -> the machine facts (``capability``, ``name``, ``count``, ``memory``, a probe's
#: name, ...) its *import* read: a module whose top level asked for them holds values of the
#: machine it was imported on (a warm worker must not reuse it for another machine)
IMPORT_CONSULTED: dict[str, set[str]] = {}


def consulted(fact: str) -> None:
    """Note that a machine fact was read; every module executing its top level at this
    moment (a ``<module>`` frame on the stack) is recorded in :data:`IMPORT_CONSULTED`."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "<module>":
            name = frame.f_globals.get("__name__")
            if isinstance(name, str) and name != "__main__" and not name.startswith("_replay"):
                IMPORT_CONSULTED.setdefault(name, set()).add(fact)
        frame = frame.f_back  # type: ignore[assignment]


class StubError(RuntimeError):
    """Raised by a stub on purpose (forced failures, unsupported operations)."""


_BASES: dict[str, type] = {}


def stub_base(qualname: str) -> type:
    """A real class standing for ``qualname`` when SGLang subclasses a stub."""
    if qualname not in _BASES:

        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            for key, value in kwargs.items():
                object.__setattr__(self, key, value)

        def __init_subclass__(cls: type, **kwargs: Any) -> None:
            return None

        def __getattr__(self: Any, name: str) -> Any:
            if name.startswith("__"):
                raise AttributeError(name)
            return StubAttr(f"{qualname}().{name}")

        def __get_pydantic_core_schema__(cls: type, source: Any, handler: Any) -> Any:
            from pydantic_core import core_schema

            return core_schema.any_schema()

        name = qualname.rpartition(".")[2] or "Stub"
        _BASES[qualname] = type(name, (), {
            "__init__": __init__, "__init_subclass__": classmethod(__init_subclass__),
            "__getattr__": __getattr__, "__replay_stub__": True, "__module__": "_replay_stubkit",
            "__get_pydantic_core_schema__": classmethod(__get_pydantic_core_schema__),
        })  # fmt: skip
    return _BASES[qualname]


class StubAttr:
    """Any attribute of a stubbed module: callable, subscriptable, a decorator, a base class."""

    __replay_stub__ = True
    __slots__ = ("_qualname",)

    def __init__(self, qualname: str) -> None:
        object.__setattr__(self, "_qualname", qualname)

    def __getattr__(self, name: str) -> Any:
        if name in ("__name__", "__qualname__"):
            return self._qualname.rpartition(".")[2]
        if name == "__module__":
            return self._qualname.rpartition(".")[0] or "_replay_stubkit"
        if name == "__doc__":
            return None
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(f"{STUB_MARK} {self._qualname} has no {name}")
        return StubAttr(f"{self._qualname}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # bare decorator: @triton.jit, @torch_custom_op... returns the function itself
        if (
            len(args) == 1
            and not kwargs
            and callable(args[0])
            and not isinstance(args[0], StubAttr)
        ):
            return args[0]
        return StubAttr(f"{self._qualname}()")

    def __getitem__(self, key: Any) -> StubAttr:
        return StubAttr(f"{self._qualname}[]")

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (stub_base(self._qualname),)

    def __or__(self, other: Any) -> Any:
        return self

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.any_schema()

    __ror__ = __or__

    def __repr__(self) -> str:
        return f"<{STUB_MARK} {self._qualname}>"

    __str__ = __repr__


class StubModule(types.ModuleType):
    """A synthetic module: every missing attribute is a :class:`StubAttr`."""

    __replay_stub__ = True

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(f"{STUB_MARK} module {self.__name__} has no {name}")
        value = StubAttr(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


def module_getattr(modname: str) -> Any:
    """A module-level ``__getattr__`` for file stubs: unknown names become :class:`StubAttr`."""

    def __getattr__(name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(f"{STUB_MARK} module {modname} has no {name}")
        return StubAttr(f"{modname}.{name}")

    return __getattr__


#: versions reported by synthetic stubs (``pkg.__version__``)
VERSIONS: dict[str, str] = {
    "triton": "3.5.1", "flashinfer": "0.6.1", "sgl_kernel": "0.3.21", "deep_gemm": "2.1.0",
    "zmq": "27.1.0", "psutil": "7.1.0", "msgspec": "0.19.0", "IPython": "9.6.0",
    "partial_json_parser": "0.2.1.1.post6", "torchvision": "0.24.0", "cuda": "12.9.0",
    "setproctitle": "1.3.7", "pybase64": "1.4.2", "soundfile": "0.13.1", "decord": "0.6.0",
    "prometheus_client": "0.23.1", "modelscope": "1.31.0", "sentencepiece": "0.2.1",
    "xgrammar": "0.1.27", "outlines": "0.1.11", "llguidance": "1.3.0", "compressed_tensors": "0.12.2",
    "interegular": "0.3.3", "einops": "0.8.1", "blobfile": "3.0.0", "uvloop": "0.21.0",
    "orjson": "3.11.3", "aiohttp": "3.13.0", "fastapi": "0.119.0", "uvicorn": "0.37.0",
    "openai": "2.6.1", "tiktoken": "0.12.0", "PIL": "12.0.0", "pynvml": "13.0.1",
    "nvidia_ml_py": "13.0.1", "numba": "0.62.1", "scipy": "1.16.2", "timm": "1.0.20",
    "av": "16.0.1", "granian": "2.5.0", "hf_transfer": "0.1.9", "aiter": "0.1.6",
}  # fmt: skip


def _file_stub(name: str) -> tuple[str, bool] | None:
    parts = name.split(".")
    for base in STUB_DIRS:
        pkg = os.path.join(base, *parts, "__init__.py")
        if os.path.isfile(pkg):
            return pkg, True
        mod = os.path.join(base, *parts) + ".py"
        if os.path.isfile(mod):
            return mod, False
    return None


class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers imports of the names in ``roots`` (and their submodules) with stubs.

    ``served`` records every module this finder handed out, for the report.
    """

    def __init__(self, roots: set[str], tier: str) -> None:
        self.roots = set(roots)
        self.tier = tier
        self.served: list[str] = []

    def covers(self, fullname: str) -> bool:
        """True if ``fullname`` is one of the roots or inside one (roots may be dotted)."""
        return any(fullname == r or fullname.startswith(r + ".") for r in self.roots)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if not self.covers(fullname):
            return None
        top = sys.modules.get(fullname.partition(".")[0])
        if self.tier == "fallback" and top is not None and not is_stub_object(top):
            return None  # a missing submodule of a real package stays missing
        if f"import:{fullname}" == FORCED_FAILURE:
            raise StubError(f"{STUB_MARK}: forced import failure of {fullname} (test hook)")
        self.served.append(fullname)
        found = _file_stub(fullname)
        if found is not None:
            file, is_pkg = found
            locations = [os.path.dirname(file)] if is_pkg else None
            return importlib.util.spec_from_file_location(
                fullname, file, submodule_search_locations=locations
            )
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return StubModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__path__ = []
        module.__replay_stub__ = True  # type: ignore[attr-defined]
        top = module.__name__.partition(".")[0]
        if module.__name__ == top and top in VERSIONS:
            module.__version__ = VERSIONS[top]  # type: ignore[attr-defined]


def install(force: set[str], fallback: set[str]) -> tuple[StubFinder, StubFinder]:
    """Put the force finder first and the fallback finder last on ``sys.meta_path``."""
    first, last = StubFinder(force, "force"), StubFinder(fallback - force, "fallback")
    sys.meta_path.insert(0, first)
    sys.meta_path.append(last)
    return first, last


def is_stub_object(obj: Any) -> bool:
    """True for stub modules, attributes and classes derived from them."""
    try:
        return bool(getattr(obj, "__replay_stub__", False))
    except Exception:
        return False
