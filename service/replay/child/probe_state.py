"""The process state a launched rank would have, faked for a start-up probe (a script of
the sandbox, stdlib only plus the release).

A probe runs the release's start-up code in the validating fork, which is no launched
server: :func:`fake_parallel` makes the release's parallel-size and rank getters answer
what the resolved server args give (:func:`parallel_sizes`; moe_tp = tp / ep / moe_dp,
every rank 0), :func:`publish` publishes the server args as the scheduler does and seeds
the MoE flags from them, and on 0.5.21+ the ranks are written into the runtime context.
Imported by bare name by ``probes.py`` and ``probe_moe.py`` inside the sandbox, and as
``service.replay.child.probe_state`` by unit tests.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import types
from collections.abc import Callable
from typing import Any

__all__ = ["fake_parallel", "parallel_sizes", "positive_int", "publish", "server_args_fields"]

_RANK = (
    "get_tensor_model_parallel_rank",
    "get_moe_expert_parallel_rank",
    "get_moe_tensor_parallel_rank",
    "get_moe_data_parallel_rank",
)


def positive_int(fields: dict[str, Any], name: str, default: int) -> int:
    """``fields[name]`` when it is a positive int, else ``default``."""
    value = fields.get(name)
    return value if isinstance(value, int) and value > 0 else default


def parallel_sizes(fields: dict[str, Any]) -> dict[str, int]:
    """The sizes a rank of this launch would see, from the resolved server-args fields."""
    tp = positive_int(fields, "tp_size", 1)
    ep = positive_int(fields, "ep_size", positive_int(fields, "moe_ep_size", 1))
    moe_dp = positive_int(fields, "moe_dp_size", 1)
    return {
        "tp_size": tp,
        "moe_ep_size": ep,
        "moe_dp_size": moe_dp,
        "moe_tp_size": max(1, tp // ep // moe_dp),
    }


def _constant(value: int) -> Callable[..., int]:
    def fake(*_args: Any, **_kwargs: Any) -> int:
        return value

    fake.__replay_probe__ = True  # type: ignore[attr-defined]
    return fake


@contextlib.contextmanager
def fake_parallel(sizes: dict[str, int]) -> Any:
    """Replace the release's parallel-size getters (and rank getters: rank 0) by constants,
    in ``parallel_state`` and every ``sglang.*`` module holding them by name. The fork ends
    after the probe, so nothing is restored."""
    values = {
        "get_tensor_model_parallel_world_size": sizes["tp_size"],
        "get_moe_expert_parallel_world_size": sizes["moe_ep_size"],
        "get_moe_tensor_parallel_world_size": sizes["moe_tp_size"],
        "get_moe_data_parallel_world_size": sizes["moe_dp_size"],
        **{name: 0 for name in _RANK},
    }
    fakes = {name: _constant(value) for name, value in values.items()}
    patched: list[str] = []
    for modname, mod in list(sys.modules.items()):
        if not modname.startswith("sglang") or mod is None:
            continue
        for attr, obj in list(vars(mod).items()):
            if attr in fakes and isinstance(obj, types.FunctionType):
                setattr(mod, attr, fakes[attr])
                patched.append(f"{modname}.{attr}")
    yield patched


def server_args_fields(server_args: Any) -> dict[str, Any]:
    """The resolved server-args fields as JSON values (:func:`values.dump_fields`)."""
    try:
        from values import dump_fields
    except ImportError:  # unit tests
        from service.replay.child.values import dump_fields  # type: ignore[no-redef]
    return dump_fields(server_args)


def publish(server_args: Any) -> None:
    """Publish the server args as the scheduler does, then seed the MoE flags from them."""
    import sglang.srt.server_args as sa

    publish = getattr(sa, "set_global_server_args_for_scheduler", None)
    if callable(publish):
        publish(server_args)
    from sglang.srt.layers.moe import utils as moe_utils

    init = moe_utils.initialize_moe_config
    if inspect.signature(init).parameters:
        init(server_args)
    else:
        init()
    _stamp_ranks()


def _stamp_ranks() -> None:
    """0.5.21+: the runtime context derives widths from the published config but a rank is
    written by the launcher; this process is rank 0 of every group."""
    context = sys.modules.get("sglang.srt.runtime_context")
    get_parallel = getattr(context, "get_parallel", None)
    derived = getattr(context, "_derived_widths", None)
    if not callable(get_parallel) or not callable(derived):
        return
    ranks = {
        name: 0
        for name, decl in derived().items()
        if name.endswith("_rank") and not getattr(decl, "fn", None)
    }
    if ranks:
        get_parallel().override_permanently(**ranks)
