"""The rule-card format: model, YAML loader, schema check and citation check.

A card is a small record (see ``sglang_triage/kb/rules/README.md``)::

    id: c-trtllm-mha-topk1
    releases: ">=0.5.9,<=0.5.23"          # PEP 440 specifier set
    when: "args.speculative_algorithm in ('EAGLE', 'EAGLE3')"
    require: "args.speculative_eagle_topk is None or args.speculative_eagle_topk <= 1"
    severity: error                        # error | warning
    citations: ["0.5.11:sglang/srt/server_args.py:ServerArgs._handle_speculative_decoding:3529-3537"]

``when`` and ``require`` are written in the engine's safe expression language
(:mod:`service.engine.expr.interpreter`): flags as ``args.X`` (the attribute name),
facts as bare names or zero-argument calls (``model_arch``,
``is_sm100_supported()``), and ``given('--flag')`` for "the user typed this
spelling" (deprecated aliases share their attribute with the new spelling).
Both are checked with :func:`~service.engine.expr.interpreter.validate` when a card
is built, so a card that would need anything outside the whitelist is refused.

Curated cards live as package data in ``sglang_triage/kb/rules/*.yaml`` (a file
holds one card or a list of cards) and are validated twice: by the pydantic
model and by ``schema.json`` (JSON Schema 2020-12).
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kb.conditions import referenced_names, validate
from kb.errors import ConfigError, UnsafeExpression
from kb.store import Store

__all__ = [
    "HELPER_READS", "RULES_DIR", "SCHEMA_PATH", "Card", "Citation", "Example", "FixHints",
    "card_schema", "citation_problem", "helper_reads", "load_curated", "load_card_file",
    "parse_citation", "release_in", "remember_reads", "schema_errors",
]  # fmt: skip

RULES_DIR = Path(__file__).resolve().parent
SCHEMA_PATH = RULES_DIR / "schema.json"

_CITATION = re.compile(
    r"^(?P<release>[^:\s]+):(?P<path>[^:\s]+):(?P<function>[^:\s]+):"
    r"(?P<start>\d+)(?:-(?P<end>\d+))?$"
)
_GIVEN = re.compile(r"\bgiven\(")


class Citation(BaseModel):
    """``release:path:function:start-end``: the source lines a card rests on."""

    release: str
    path: str
    function: str
    start: int
    end: int

    def __str__(self) -> str:
        span = f"{self.start}-{self.end}" if self.end != self.start else str(self.start)
        return f"{self.release}:{self.path}:{self.function}:{span}"


def parse_citation(text: str) -> Citation:
    """Parse ``release:path:function:start-end`` (``-end`` optional); ValueError otherwise."""
    m = _CITATION.match(text.strip())
    if m is None:
        raise ValueError(f"citation {text!r} is not release:path:function:start-end")
    start = int(m["start"])
    end = int(m["end"]) if m["end"] else start
    if end < start:
        raise ValueError(f"citation {text!r} ends before it starts")
    return Citation(
        release=m["release"], path=m["path"], function=m["function"], start=start, end=end
    )


class FixHints(BaseModel):
    """Edits that usually satisfy the card: ``set`` flag -> value, ``remove`` flags.

    Keys are flag spellings (``--speculative-eagle-topk``) or attribute names;
    the checker verifies every hint before offering it.
    """

    model_config = ConfigDict(extra="forbid")

    set: dict[str, Any] = Field(default_factory=dict)
    remove: list[str] = Field(default_factory=list)

    def empty(self) -> bool:
        return not self.set and not self.remove


class Example(BaseModel):
    """Two launch commands (argv tokens without the program) the card must judge as stated.

    ``fail`` must be *violated* and ``pass`` must not be (satisfied or not
    applicable) on ``release`` with the declared ``hardware``/``model_arch``.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    pass_: list[str] = Field(default_factory=list, alias="pass")
    fail: list[str] = Field(default_factory=list)
    release: str
    hardware: str | None = None
    model_arch: str | None = None


class Card(BaseModel):
    """One rule card (see the module docstring and ``kb/rules/README.md``)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{1,79}$")
    title: str = Field(min_length=3, max_length=200)
    releases: str
    when: str = "True"
    require: str
    severity: Literal["error", "warning"]
    message: str
    rationale: str = ""
    citations: list[str] = Field(min_length=1)
    fix_hints: FixHints = Field(default_factory=FixHints)
    origin: Literal["derived", "curated"]
    examples: list[Example] = Field(default_factory=list)

    @field_validator("examples", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, dict) else v

    @field_validator("releases")
    @classmethod
    def _specifier(cls, v: str) -> str:
        try:
            SpecifierSet(v)
        except InvalidSpecifier as exc:
            raise ValueError(f"releases {v!r} is not a PEP 440 specifier set: {exc}") from exc
        return v

    @field_validator("when", "require")
    @classmethod
    def _condition(cls, v: str) -> str:
        try:
            validate(v)
        except UnsafeExpression as exc:
            raise ValueError(f"condition refused by the safe evaluator: {exc.message}") from exc
        return v

    @field_validator("citations")
    @classmethod
    def _citations(cls, v: list[str]) -> list[str]:
        for c in v:
            parse_citation(c)
        return v

    @model_validator(mode="after")
    def _examples_in_range(self) -> Card:
        for ex in self.examples:
            if not self.applies_to(ex.release):
                raise ValueError(f"example release {ex.release} is outside {self.releases}")
        return self

    # -- behaviour -------------------------------------------------------------------
    def applies_to(self, release: str) -> bool:
        """Is ``release`` inside the card's range (pre- and dev releases included)?"""
        return _applies(self.releases, release)

    @property
    def reads(self) -> frozenset[str]:
        """Attributes the conditions read (``args.X``), without evaluating them."""
        hit = _known_reads.get((self.when, self.require))
        return hit if hit is not None else _reads(self.when, self.require)

    @property
    def uses_given(self) -> bool:
        """Does the card look at flag spellings (``given('--x')``), not only values?"""
        return bool(_GIVEN.search(self.when) or _GIVEN.search(self.require))

    def citation_list(self) -> list[Citation]:
        return [parse_citation(c) for c in self.citations]

    def citations_for(self, release: str) -> list[str]:
        """The citations of ``release`` (all of them when none is for that release)."""
        mine = [c for c in self.citations if c.split(":", 1)[0] == release]
        return mine or list(self.citations)


@functools.lru_cache(maxsize=65536)
def release_in(spec: str, release: str) -> bool:
    """Is ``release`` inside the PEP 440 range ``spec`` (pre- and dev releases included)?
    False when either does not parse. What :meth:`Card.applies_to` asks, for a card not
    validated yet (its range read from a stored record)."""
    return _applies(spec, release)


@functools.lru_cache(maxsize=65536)
def _applies(spec: str, release: str) -> bool:
    try:
        return SpecifierSet(spec).contains(Version(release), prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return False


@functools.lru_cache(maxsize=65536)
def _reads(when: str, require: str) -> frozenset[str]:
    return referenced_names(when) | referenced_names(require)


_known_reads: dict[tuple[str, str], frozenset[str]] = {}


def remember_reads(when: str, require: str, reads: frozenset[str]) -> None:
    """Record what a card reads (known from derivation) so it is not re-parsed."""
    _known_reads[(when, require)] = reads


#: Helpers of SGLang 0.5.2x that conditions may call with the argument object, and the
#: attributes each reads (the checker evaluates them; see ``service.engine.rules.card_env.CARD_FUNCTIONS``).
HELPER_READS: dict[str, tuple[str, ...]] = {
    "attn_dp_enabled_of": ("attn_dp_size", "ep_join_mode"),
    "num_dp_ranks_of": ("dp_size", "attn_dp_size"),
    "attention_backends_of": (
        "attention_backend",
        "prefill_attention_backend",
        "decode_attention_backend",
    ),
}


def helper_reads(*texts: str) -> frozenset[str]:
    """Attributes read inside the helpers that ``texts`` call."""
    out: set[str] = set()
    for helper, reads in HELPER_READS.items():
        if any(helper in t for t in texts):
            out.update(reads)
    return frozenset(out)


# --------------------------------------------------------------------------- loading


def load_card_file(path: Path) -> list[Card]:
    """The cards of one YAML file (a mapping or a list of mappings), schema-checked.

    Raises :class:`ConfigError` naming the file and the card on any problem.
    """
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read rule file {path.name}: {exc}") from exc
    items = data if isinstance(data, list) else [data]
    cards: list[Card] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ConfigError(f"{path.name}: entry {i} is not a mapping")
        problems = schema_errors(item)
        if problems:
            raise ConfigError(
                f"{path.name}: card {item.get('id', i)!r} breaks the schema: "
                + "; ".join(problems[:3]),
                details={"errors": problems},
            )
        try:
            cards.append(Card.model_validate(item))
        except ValueError as exc:
            raise ConfigError(f"{path.name}: card {item.get('id', i)!r} is invalid: {exc}") from exc
    return cards


@functools.lru_cache(maxsize=4)
def _load_dir(directory: str, stamp: tuple[tuple[str, float], ...]) -> tuple[Card, ...]:
    cards: list[Card] = []
    for name, _ in stamp:
        cards.extend(load_card_file(Path(directory) / name))
    ids = [c.id for c in cards]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ConfigError(f"duplicate rule ids: {', '.join(dupes)}")
    return tuple(cards)


def load_curated(directory: Path | None = None) -> list[Card]:
    """Every curated card in ``directory`` (default: the package's ``kb/rules``).

    Cached until a file changes (by name and modification time).
    """
    d = directory or RULES_DIR
    files = sorted(d.glob("*.yaml")) + sorted(d.glob("*.yml"))
    stamp = tuple((p.name, p.stat().st_mtime) for p in files)
    return list(_load_dir(str(d), stamp))


@functools.lru_cache(maxsize=1)
def card_schema() -> dict[str, Any]:
    """The JSON Schema of a card (``kb/rules/schema.json``)."""
    schema: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return schema


def schema_errors(item: dict[str, Any]) -> list[str]:
    """JSON Schema violations of one card record (empty when it conforms)."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(card_schema())
    return [
        f"{'/'.join(str(p) for p in e.absolute_path) or '<card>'}: {e.message}"
        for e in validator.iter_errors(item)
    ]


# ------------------------------------------------------------------------- citations


def citation_problem(store: Store, citation: str) -> str | None:
    """Why ``citation`` is not a real place in the KB, or None when it is.

    It must name an ingested release, a file of it, and a function of that
    file (by qualified name) whose lines contain ``start``-``end``.
    """
    try:
        c = parse_citation(citation)
    except ValueError as exc:
        return str(exc)
    if store.release(c.release) is None:
        return f"release {c.release} is not in the KB"
    rows = store.query(
        "SELECT start_line, end_line, decorator_start FROM functions "
        "WHERE release = ? AND path = ? AND qualname = ?",
        (c.release, c.path, c.function),
    )
    if not rows:
        if not store.file_lines(c.release, c.path, 1, 1):
            return f"{c.path} is not a file of {c.release}"
        return f"{c.function} is not a function of {c.release}:{c.path}"
    for r in rows:
        first = min(r["start_line"], r["decorator_start"] or r["start_line"])
        if first <= c.start and c.end <= r["end_line"]:
            return None
    spans = ", ".join(f"{r['start_line']}-{r['end_line']}" for r in rows)
    return f"lines {c.start}-{c.end} are outside {c.function} ({spans})"
