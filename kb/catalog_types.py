"""The records of the static flag catalog: :class:`FlagSpec`, :class:`Declaration`, :class:`Catalog`.

They are re-exported by :mod:`ingest.catalog`, which builds them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["NO_VALUE_ACTIONS", "Catalog", "Declaration", "FlagSpec", "Layout", "nargs_kind"]

Layout = Literal["argparse", "annotated_field"]


@dataclass
class FlagSpec:
    attr: str
    flags: list[str]
    type: str | None
    action: str | None
    nargs: str | None
    default: object
    default_known: bool
    default_src: str | None
    choices: list[object] | None
    choices_src: str | None
    help: str | None
    required: bool
    deprecated: bool
    path: str
    line: int
    layout: Layout
    # --- additions beyond the brief (all optional) ---
    const: object = None
    # argparse dest when it differs from ``attr`` (renamed in ServerArgs.from_cli_args)
    dest: str | None = None
    # remaining add_argument / action kwargs, e.g. new_flag, error_message, const_value
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def takes_value(self) -> bool:
        """Whether a spelling of this flag consumes value tokens."""
        return nargs_kind(self) != "0"


@dataclass
class Declaration:
    attr: str
    annotation: str
    default: object
    default_known: bool
    default_src: str | None
    help: str | None
    path: str
    line: int
    cls: str


@dataclass
class Catalog:
    """A release's flags. ``flags`` are the LLM server's (``launch_server``, ``sglang serve``
    with a language model); ``diffusion`` are the diffusion server's own parser's
    (``sglang/multimodal_gen``), kept apart: empty for a release without it or a KB
    indexed before they were extracted."""

    flags: list[FlagSpec]
    declarations: list[Declaration]
    diffusion: list[FlagSpec] = field(default_factory=list)

    def by_flag(self) -> dict[str, FlagSpec]:
        out: dict[str, FlagSpec] = {}
        for spec in self.flags:
            for spelling in spec.flags:
                out.setdefault(spelling, spec)
        return out

    def diffusion_catalog(self) -> Catalog:
        """The diffusion server's flags as a catalog of their own (no declarations)."""
        return Catalog(flags=list(self.diffusion), declarations=[])

    def by_attr(self) -> dict[str, FlagSpec]:
        """attr -> its main spec (a non-deprecated one when there is a choice)."""
        out: dict[str, FlagSpec] = {}
        for spec in self.flags:
            cur = out.get(spec.attr)
            if cur is None or (cur.deprecated and not spec.deprecated):
                out[spec.attr] = spec
        return out

    def specs_for(self, attr: str) -> list[FlagSpec]:
        """Every spec writing ``attr`` (e.g. a live flag plus a deprecated spelling)."""
        return [s for s in self.flags if s.attr == attr]

    def declaration(self, attr: str) -> Declaration | None:
        for decl in self.declarations:
            if decl.attr == attr:
                return decl
        return None


#: argparse actions whose flags consume no value tokens.
NO_VALUE_ACTIONS = frozenset(
    {
        "store_true",
        "store_false",
        "store_const",
        "append_const",
        "count",
        "help",
        "version",
        "BooleanOptionalAction",
    }
)


def nargs_kind(spec: FlagSpec) -> str:
    """``"0"`` when the flag takes no value tokens, else its nargs ("1" for a single value)."""
    if spec.action in NO_VALUE_ACTIONS:
        return "0"
    if spec.nargs is None:
        return "1"
    return spec.nargs
