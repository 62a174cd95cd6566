"""What the user asked for, and how much of it a fix keeps.

A launch command mixes two kinds of flags. **Feature flags** say *what* to run: the
model, and the capabilities and modes the user switched on. **Settings** say *how*:
kernels and backends, sizes, counts, thresholds, dtypes. A fix that changes a setting
keeps the user's request; a fix that drops a feature gives part of it up, however
cleanly it passes the check. The classification reads only the release's flag catalog
(:class:`~kb.catalog_types.FlagSpec`) and the value the user gave:

* **the model**: a required flag, or ``model_path`` (what is served at all);
* **switches**: a flag that takes no value (``store_true``, ``store_const``,
  ``BooleanOptionalAction``, a custom action with ``nargs=0``) or an ``enable_*`` /
  ``use_*`` attribute, set to a true value, unless the attribute says it turns
  something *off* (``disable_*``, ``no_*``, ``skip_*``): ``--enable-lora``,
  ``--enable-dp-attention``, ``--encoder-only``, ``--trust-remote-code``;
* **selectors**: a value flag that picks which feature runs rather than how:
  its attribute names an algorithm or a mode (``*_algorithm``, ``*_mode``), a
  quantization method (``quantization``), adapters or a model to load
  (``*_paths``, ``*_model_path``), or its choices include an explicit "off" value
  (``none``, ``null``, ``off``, ``disabled``), so that any other choice switches a
  feature on (``--moe-a2a-backend deepep``, ``--disaggregation-mode decode``). A
  selector counts only when the user picked a value other than its default (asking
  for the default asks for nothing).

Everything else is a setting. A fix **gives up** a feature flag when, after it, the
attribute no longer holds the user's value: removed (back to a default that differs),
set to another value, or switched off. :func:`intent_cost` orders candidates by what
they keep: fewer features switched off (a selector given another value that still asks
for a feature keeps the feature on, unless it is a mode: ``decode`` for ``prefill`` is
another role), then fewer given up, then fewer of the user's explicit values
overridden (so adding a missing companion flag, which overrides nothing, comes before
changing or dropping the user's own), then a smaller edit.

**Counts and sizes** (:func:`is_count`): an ``int`` flag whose attribute or help names
a size, a number or a count (``*_size``, ``num_*``, ``*_topk``, ``*_steps``,
``*_tokens``, "The number of ..."). :func:`sane_value` refuses a value <= 0 for one
unless its current value is itself <= 0 (or a listed choice): such a value only makes
the comparison false (``--speculative-eagle-topk 0`` against ``topk > 1``), it is never
what a user who set a positive count (or left it to SGLang) wants, and SGLang itself
never chooses it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kb.catalog_types import NO_VALUE_ACTIONS, Catalog, FlagSpec
from service.engine.expr.interpreter import UNKNOWN, Value
from service.engine.flags.parse import ParsedArgs

__all__ = [
    "IntentCost",
    "Loss",
    "gives_up_sentence",
    "intent_cost",
    "is_count",
    "is_feature",
    "losses",
    "sane_value",
]

_OFF_PREFIXES = ("disable_", "no_", "skip_")
_ON_PREFIXES = ("enable_", "use_")
_SELECTOR_SUFFIXES = ("_algorithm", "_mode", "_paths", "_model_path")
_SELECTOR_NAMES = frozenset({"quantization"})
_OFF_CHOICES = frozenset({"none", "null", "off", "disabled"})
_COUNT_WORDS = frozenset(
    {
        "size",
        "num",
        "topk",
        "steps",
        "tokens",
        "count",
        "workers",
        "sessions",
        "replicas",
        "degree",
        "len",
        "length",
    }
)
_COUNT_HELP = re.compile(r"\b(number of|size|count)\b", re.IGNORECASE)


def _no_value(spec: FlagSpec) -> bool:
    return spec.action in NO_VALUE_ACTIONS or spec.nargs == "0"


def is_feature(spec: FlagSpec, value: object) -> bool:
    """Whether ``spec`` set to ``value`` (the user's) asks for a feature (module docstring)."""
    attr = spec.attr
    if spec.required or attr == "model_path":
        return True
    if attr.startswith(_OFF_PREFIXES):
        return False
    if _no_value(spec) or attr.startswith(_ON_PREFIXES):
        return value is not UNKNOWN and bool(value)
    if spec.default_known and value == spec.default:
        return False
    if value is None or (isinstance(value, str) and value.lower() in _OFF_CHOICES):
        return False
    if attr in _SELECTOR_NAMES or attr.endswith(_SELECTOR_SUFFIXES):
        return True
    return any(isinstance(c, str) and c.lower() in _OFF_CHOICES for c in spec.choices or [])


def is_count(spec: FlagSpec) -> bool:
    """An ``int`` flag holding a size, number or count (module docstring)."""
    if spec.type != "int":
        return False
    words = set(spec.attr.split("_"))
    return bool(words & _COUNT_WORDS) or bool(_COUNT_HELP.search(spec.help or ""))


def sane_value(spec: FlagSpec | None, value: object, current: object) -> bool:
    """False for a value no one would choose: <= 0 for a count, unless its current value
    (the user's, or the default) is itself <= 0 or the flag lists the value as a choice."""
    if spec is None or not is_count(spec):
        return True
    if isinstance(value, bool) or not isinstance(value, int | float) or value > 0:
        return True
    if value in (spec.choices or []):
        return True
    return isinstance(current, int | float) and not isinstance(current, bool) and current <= 0


@dataclass(frozen=True)
class Loss:
    """A feature flag the user set that a fix does not keep."""

    attr: str
    spelling: str  # as the user typed it, with its value: "--speculative-algorithm EAGLE3"
    new: object  # the value after the fix (a default when removed); UNKNOWN if not known
    #: the feature is switched off, not only given another value: the value after the fix
    #: asks for no feature (:func:`is_feature`), or is not known, or the flag is a mode
    #: (``*_mode``: another mode is another role, not the same feature kept on)
    off: bool

    def phrase(self) -> str:
        if self.new is None or self.new is False or self.new is UNKNOWN:
            return self.spelling
        if isinstance(self.new, str) and self.new.lower() in _OFF_CHOICES:
            return self.spelling
        return f"{self.spelling} (for {self.new!r})"


def _default(attr: str, catalog: Catalog) -> object:
    decl = catalog.declaration(attr)
    if decl is not None and decl.default_known:
        return decl.default
    spec = catalog.by_attr().get(attr)
    return spec.default if spec is not None and spec.default_known else UNKNOWN


def losses(
    set_: dict[str, object], remove: list[str], parsed: ParsedArgs, catalog: Catalog
) -> list[Loss]:
    """The feature flags of the user's command that an edit (``set_``, ``remove``,
    attribute names) leaves without the user's value, in command-line order."""
    by_attr = catalog.by_attr()
    out: list[Loss] = []
    for attr, pf in sorted(parsed.values.items(), key=lambda kv: kv[1].index):
        spec = by_attr.get(attr)
        if spec is None or not is_feature(spec, pf.value):
            continue
        if attr in set_:
            new = set_[attr]
        elif attr in remove:
            new = _default(attr, catalog)
        else:
            continue
        if new == pf.value and new is not UNKNOWN:
            continue
        # a mode picks one of exclusive roles (``--disaggregation-mode prefill``): another
        # is not the same feature kept on
        off = new is UNKNOWN or not is_feature(spec, new) or attr.endswith("_mode")
        out.append(Loss(attr, " ".join(pf.raw) or pf.token, new, off))
    return out


def gives_up_sentence(lost: list[Loss]) -> str:
    """One sentence naming what a fix gives up of the request ("" when nothing)."""
    if not lost:
        return ""
    return "gives up " + ", ".join(x.phrase() for x in lost)


@dataclass(frozen=True, order=True)
class IntentCost:
    """How much of the request an edit gives up; compares lower-is-better."""

    features: int  # feature flags given up
    overridden: int  # other explicit values of the user's changed or dropped
    added: int  # flags the user did not set that the edit sets
    #: of the feature flags given up, those switched off (not given another value that
    #: keeps the feature on: ``--speculative-algorithm EAGLE`` for ``NEXTN`` keeps
    #: speculative decoding, dropping the flag does not)
    off: int = 0


def intent_cost(
    set_: dict[str, object],
    remove: list[str],
    parsed: ParsedArgs,
    catalog: Catalog,
    attrs: dict[str, Value] | None = None,
) -> IntentCost:
    """The :class:`IntentCost` of an edit of attributes (``set_``, ``remove``)."""
    given_up = losses(set_, remove, parsed, catalog)
    lost = {x.attr for x in given_up}
    mine = set(parsed.values)
    touched = set(set_) | set(remove)
    overridden = {
        a
        for a in touched & mine
        if a not in lost and not (a in set_ and set_[a] == parsed.values[a].value)
    }
    added = {
        a for a in set(set_) - mine if attrs is None or a not in attrs or attrs[a].value != set_[a]
    }
    return IntentCost(len(lost), len(overridden), len(added), sum(x.off for x in given_up))
