"""Version-skew shims between the release and the venv's real packages (child side).

The replay runs the release against whatever ``transformers`` the venv has
(5.x here), not the version the release pins. Newer transformers ships some
configs SGLang registers itself (``qwen3_asr``...), and registering a known
name raises. :func:`patch_transformers` makes every Auto* registration
``exist_ok``, so SGLang's own class is registered over the built-in one, as
under the pinned version.

:func:`patch_torch_library`: SGLang registers fake (meta) implementations
for operators that ``sgl_kernel``'s compiled library defines
(``torch.library.register_fake("sgl_kernel::...")``). With ``sgl_kernel``
stubbed those operators do not exist, so registrations for the stubbed
packages' namespaces become no-ops (they only matter to ``torch.compile``).

:func:`patch_torch_cpu`: older releases (0.4.x) ask ``torch._C._cpu`` for CPU ISA
probes at import time (``cpu_has_amx_support``) that newer torch no longer has. The
missing ones answer False: the declared machine is a GPU one, its CPU's ISA is not
what validation decides on.
"""

from __future__ import annotations

from typing import Any


def _exist_ok(register: Any) -> Any:
    def wrapper(self: Any, key: Any, value: Any, exist_ok: bool = True) -> Any:
        return register(self, key, value, exist_ok=True)

    wrapper.__wrapped__ = register  # type: ignore[attr-defined]
    return wrapper


def patch_transformers() -> list[str]:
    """Make Auto* registrations tolerant; returns what was patched (empty without transformers)."""
    patched: list[str] = []
    try:
        from transformers.models.auto import auto_factory, configuration_auto
    except Exception:
        return patched
    for mod, cls_name in (
        (configuration_auto, "_LazyConfigMapping"),
        (auto_factory, "_LazyAutoMapping"),
    ):
        cls = getattr(mod, cls_name, None)
        if cls is not None and hasattr(cls, "register"):
            cls.register = _exist_ok(cls.register)
            patched.append(f"{mod.__name__}.{cls_name}.register")
    return patched


def patch_torch_library(namespaces: set[str]) -> list[str]:
    """Skip ``register_fake``/``impl_abstract`` for operators of stubbed packages."""
    import torch.library as tl

    patched: list[str] = []
    for name in ("register_fake", "impl_abstract"):
        original = getattr(tl, name, None)
        if original is None:
            continue

        def wrapper(op: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            if isinstance(op, str) and op.partition("::")[0] in namespaces:
                if args and callable(args[0]):
                    return args[0]
                return lambda fn: fn
            return _original(op, *args, **kwargs)

        wrapper.__wrapped__ = original  # type: ignore[attr-defined]
        setattr(tl, name, wrapper)
        patched.append(f"torch.library.{name} (no-op for {', '.join(sorted(namespaces))})")
    return patched


#: CPU ISA probes of ``torch._C._cpu`` that releases call and newer torch dropped
CPU_PROBES: tuple[str, ...] = (
    "_is_amx_tile_supported",
    "_is_amx_fp16_supported",
    "_is_avx512_supported",
    "_is_avx512_vnni_supported",
    "_is_avx512_bf16_supported",
    "_init_amx",
)


def patch_torch_cpu() -> list[str]:
    """Add the :data:`CPU_PROBES` torch lacks, answering False; returns what was added."""
    try:
        import torch
    except Exception:
        return []
    cpu = getattr(getattr(torch, "_C", None), "_cpu", None)
    if cpu is None:
        return []
    added: list[str] = []
    for name in CPU_PROBES:
        if not hasattr(cpu, name):
            setattr(cpu, name, lambda: False)
            added.append(f"torch._C._cpu.{name} (False)")
    return added
