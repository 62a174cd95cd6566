"""Memory sizing: a value for a numeric flag an error asks to raise or lower.

SGLang sizes its KV pool (and the mamba state pool of hybrid models) at start-up from
the GPU memory left after the weights: ``max_total_num_tokens`` comes from
``--mem-fraction-static`` and the free memory, the request slots from
``--max-running-requests``, the prefill buffers from ``--chunked-prefill-size``, the
mamba pool from ``--mamba-full-memory-ratio`` / ``--max-mamba-cache-size``. When a pool
comes out empty it says which flag to move ("Not enough memory. Please try to increase
--mem-fraction-static", "try to increase --mamba-full-memory-ratio", "set a smaller
number for `--max-running-requests`"); :mod:`service.engine.fixes.recipe` reads that
direction and :func:`sized_value` picks the value:

* a **fraction** of memory (a float flag whose name holds ``fraction`` or ``ratio``):
  past the bound the message printed ("Raise --mem-fraction-static above 0.873": 0.88),
  else one step of 0.05 from the current value; never above :data:`MAX_FRACTION` (0.95:
  the rest is CUDA graphs and activations) nor below :data:`MIN_FRACTION`. Without a
  printed bound the step is a rough estimate: whether it is enough depends on the free
  GPU memory at start-up, which the log rarely shows;
* a **count** or size (an ``int`` flag): halved to lower it, doubled to raise it, from
  the current value (the command's, the message's, or the release's default). A count
  SGLang derives itself (no value anywhere) is not guessed.

The current value is the launch's: its command line, else the value the message printed
under the flag's own name (``mem_fraction_static=0.8``, ``--mem-fraction-static=0.8``),
else the release's default.
"""

from __future__ import annotations

import math
import re

from kb.catalog_types import FlagSpec
from service.engine.expr.interpreter import Value
from service.engine.locate.message import BoundValue

__all__ = [
    "MAX_FRACTION",
    "MIN_FRACTION",
    "current_value",
    "is_fraction",
    "is_numeric",
    "printed_value",
    "sized_value",
]

#: highest static memory fraction proposed
MAX_FRACTION = 0.95
#: lowest fraction proposed when lowering one
MIN_FRACTION = 0.5
#: longest message searched for a printed value
MAX_MESSAGE_CHARS = 4_000
#: one rough step of a fraction
FRACTION_STEP = 0.05


def is_numeric(spec: FlagSpec) -> bool:
    """Does ``spec`` take a number (``int``, ``float``, a human-readable int)?"""
    return (spec.type or "") in ("int", "float", "human_readable_int") or (
        spec.type or ""
    ).endswith("_int")


def is_fraction(spec: FlagSpec) -> bool:
    """A float flag holding a share of memory (``mem_fraction_static``, ``*_ratio``)."""
    words = set(spec.attr.split("_"))
    return spec.type == "float" and bool(words & {"fraction", "ratio", "frac"})


def _number(value: object) -> float | int | None:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def printed_value(spec: FlagSpec, message: str | None) -> float | None:
    """The value the message printed for ``spec`` in its text (``mem_fraction_static=0.8``,
    ``--mem-fraction-static=0.8``, ``--max-running-requests 64``), None when it printed none."""
    text = (message or "")[:MAX_MESSAGE_CHARS]
    for name in (*spec.flags, spec.attr):
        for m in re.finditer(
            rf"(?<![\w-]){re.escape(name)}(?![\w-])[`'\"]?\s{{0,2}}[=:]?\s{{0,2}}"
            r"(-?[0-9]{1,12}(?:\.[0-9]{1,12})?)(?!\.?[0-9])",
            text,
        ):
            return float(m.group(1))
    return None


def current_value(
    spec: FlagSpec,
    attrs: dict[str, Value],
    bound: list[BoundValue],
    message: str | None = None,
    user_set: set[str] | None = None,
) -> object:
    """The value the crashed launch ran with for ``spec`` (see the module), None unknown:
    the command's, else the one the message printed (bound to a placeholder, or in its
    text), else the release's default."""
    have = attrs.get(spec.attr)
    if (
        have is not None
        and _number(have.value) is not None
        and (user_set is None or spec.attr in user_set)
    ):
        return have.value
    for b in bound:
        if b.expr.rsplit(".", 1)[-1] == spec.attr and _number(b.value) is not None:
            return b.value
    printed = printed_value(spec, message)
    if printed is not None:
        return int(printed) if spec.type == "int" and printed.is_integer() else printed
    if have is not None and _number(have.value) is not None:
        return have.value
    if spec.default_known and _number(spec.default) is not None:
        return spec.default
    return None


def sized_value(
    spec: FlagSpec, direction: str, current: object, bound: float | None
) -> tuple[object, str, bool] | None:
    """(value, how it was chosen, rough?) moving ``spec`` in ``direction`` (``increase`` or
    ``decrease``) from ``current``, past ``bound`` when the message printed one; None
    when no sane value exists (a fraction already at :data:`MAX_FRACTION`, an unknown
    count)."""
    cur = current if isinstance(current, int | float) and not isinstance(current, bool) else None
    if is_fraction(spec):
        return _fraction(direction, cur, bound)
    if spec.type == "float":
        return None
    if bound is not None:
        value = math.floor(bound) + 1 if direction == "increase" else math.ceil(bound) - 1
        if value > 0:
            return value, f"the message asks for a value {_word(direction)} {bound:g}", False
        return None
    if cur is None or cur <= 0:
        return None
    cur = int(cur)
    value = cur * 2 if direction == "increase" else cur // 2
    if value <= 0 or value == cur:
        return None
    return (
        value,
        (
            f"{'doubled' if direction == 'increase' else 'halved'} from {cur}: a rough "
            "step, the size that fits depends on the free GPU memory"
        ),
        True,
    )


def _word(direction: str) -> str:
    return "above" if direction == "increase" else "below"


def _fraction(
    direction: str, cur: float | None, bound: float | None
) -> tuple[object, str, bool] | None:
    if bound is not None:
        value = (
            math.floor(bound * 100 + 1) / 100
            if direction == "increase"
            else math.ceil(bound * 100 - 1) / 100
        )
        if direction == "increase" and value > MAX_FRACTION:
            return None
        if not 0 < value < 1:
            return None
        return (
            round(value, 2),
            (
                f"the message asks for a value {_word(direction)} {bound:g}; "
                f"{round(value, 2)} is the next step past it"
            ),
            False,
        )
    if direction == "increase":
        start = cur
        if start is None:
            return (
                round(MAX_FRACTION - FRACTION_STEP, 2),
                (
                    "the launch left it to SGLang (chosen from the GPU memory, usually lower); "
                    f"{MAX_FRACTION - FRACTION_STEP:.2f} is a rough estimate"
                ),
                True,
            )
        if start >= MAX_FRACTION:
            return None
        value = round(min(MAX_FRACTION, start + FRACTION_STEP), 2)
        return (
            value,
            (
                f"raised from {start:g} by one step, at most {MAX_FRACTION}: a rough "
                "estimate, whether it is enough depends on the free GPU memory"
            ),
            True,
        )
    if cur is None or cur <= MIN_FRACTION:
        return None
    value = round(max(MIN_FRACTION, cur - FRACTION_STEP), 2)
    return value, f"lowered from {cur:g} by one step: a rough estimate", True
