"""The triage answer: pydantic models that serialise to stable JSON.

Every place in SGLang's source is a :class:`Citation` (``release:path:line``)
that exists in the KB. Values that may be :data:`~service.engine.expr.interpreter.UNKNOWN` are rendered
by :func:`jsonable` as the string ``"unknown"``.

A field whose default is pydantic's ``MISSING`` is a key only some answers carry (a step
that ran, a fact that was stamped): while it is ``MISSING`` it is left out of the JSON
altogether, so the answer serialises exactly as the dict it replaced did.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import MISSING, BaseModel, Field

from service.engine.expr.interpreter import UNKNOWN


def jsonable(value: object) -> Any:
    """A JSON-safe rendering of an evaluated value."""
    if value is UNKNOWN:
        return "unknown"
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return repr(value)


def tri(value: object) -> Literal["true", "false", "unknown"]:
    if value is True:
        return "true"
    if value is False:
        return "false"
    return "unknown"


class Citation(BaseModel):
    release: str
    path: str
    line: int
    end_line: int | None = None

    def __str__(self) -> str:
        span = (
            f"{self.line}-{self.end_line}"
            if self.end_line and self.end_line != self.line
            else f"{self.line}"
        )
        return f"{self.release}:{self.path}:{span}"

    @property
    def ref(self) -> str:
        return str(self)


class ExcerptLine(BaseModel):
    line: int
    text: str
    highlight: bool = False


#: how a check was located (``Location.method``)
LocateMethod = Literal[
    "frame_line", "frame_source", "function_kind", "message", "search", "argparse"
]


class Location(BaseModel):
    path: str
    function: str
    start_line: int
    end_line: int
    reported_line: int | None = None
    method: LocateMethod
    confidence: float
    citation: str
    excerpt: list[ExcerptLine] = Field(default_factory=list)
    alternatives: list[str] = Field(default_factory=list)


class CheckInfo(BaseModel):
    id: int
    kind: str
    exc_type: str | None
    bare: bool
    condition: str | None
    message: str | None
    guards: list[dict[str, Any]]


class AtomInput(BaseModel):
    name: str
    value: Any
    source: str  # flag | default | write | fact | derived | unknown
    detail: str


class AtomOut(BaseModel):
    text: str
    role: str  # call_site | guard | test
    value: Literal["true", "false", "unknown"]
    failing: bool
    inputs: list[AtomInput]
    #: which piece of the path (a call site, a guard, the check's own test; in path order)
    #: the atom is a leaf of: a guard naming a local (``uses_x and y``) is evaluated with
    #: the local's definition, so its atoms' texts need not appear in the guard's text
    piece: int | None = None


class EvaluationOut(BaseModel):
    fired: Literal["true", "false", "unknown"]
    atoms: list[AtomOut]
    caveats: list[str] = Field(default_factory=list)
    writes: dict[str, list[str]] = Field(default_factory=dict)


class RuleVerdict(BaseModel):
    rule: str
    verdict: Literal["violated", "satisfied", "unknown", "not_applicable"]
    severity: str
    reason: str = ""
    #: violated by ``--model-path`` alone on this model and machine too: no flag choice
    #: causes or cures it, so it does not make a fix "violating" (reported, not held against)
    background: bool = False


class FixOut(BaseModel):
    rank: int
    set: dict[str, Any] = Field(default_factory=dict)  # flag spelling -> value
    remove: list[str] = Field(default_factory=list)  # flag spellings
    argv: list[str]
    command: str
    #: False when the log showed no full launch command (no model path, no config file, no
    #: logged server arguments): ``command`` then holds only the flags the log showed,
    #: changed, and cannot be run as it is; the edit lines say what to change in the user's
    #: own command
    command_complete: bool = True
    origin: str
    fixes_check: Literal["true", "false", "unknown"]
    trips: list[dict[str, Any]] = Field(default_factory=list)
    unknown_neighbours: int = 0
    verdict: str
    recommended: bool = False
    rule_verdicts: list[RuleVerdict] = Field(default_factory=list)
    replay: dict[str, Any] | None = None
    #: the edit in the user's own spellings, one line each: ``+ --speculative-num-steps 3``,
    #: ``- --dp 3`` (a changed value is its ``-`` line then its ``+`` line)
    edits: list[str] = Field(default_factory=list)
    #: one sentence: what this fix gives up of what the user asked for ("" when nothing)
    gives_up: str = ""
    #: every feature flag the user set is still set, with the user's value
    keeps_features: bool = True


class UnknownFact(BaseModel):
    what: str
    why: str
    settle: str


class Reference(BaseModel):
    kind: str  # declaration | help | write | check
    citation: str
    text: str


class ReleaseChange(BaseModel):
    """How the located check, or a flag an argparse error names, stands in another ingested
    release: ``same``/``moved``/``changed``/``removed`` for a check, ``added``/``removed``/
    ``renamed``/``deprecated`` for a flag; ``citations`` are ``release:path:line`` in the KB."""

    subject: str  # "check" or the flag spelling
    release: str
    status: Literal["same", "moved", "changed", "removed", "added", "renamed", "deprecated"]
    note: str
    citations: list[str] = Field(default_factory=list)
    condition: str | None = None


class ParsedSummary(BaseModel):
    exception: str | None = None
    message: str | None = None
    bare: bool | None = None
    python: str | None = None
    command: list[str] | None = None
    model: str | None = None
    model_arch: str | None = None
    hardware: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)


class PrintedValue(BaseModel):
    """A value the crash message printed, bound to the expression the check formatted
    (``moe_intermediate_size`` = 1536): ``role`` says how the evaluation used it
    (``fact``: pinned as a fact; ``flag``: the value of ``flag``'s attribute ``attr``,
    filled in when the command did not set it; ``derived``: computed from flags, compared)."""

    expr: str
    text: str
    value: Any
    role: str  # fact | flag | derived
    attr: str | None = None
    note: str = ""


class ModelFact(BaseModel):
    """A fact about the checkpoint the answer used (``quantization``, ``architecture``, ``mla``),
    and where it came from: ``config.json`` at a local path or in the local Hugging Face cache,
    or the table of well-known public models (``kb`` data)."""

    name: str
    value: Any
    source: str  # config.json | hf_cache | known_model
    detail: str = ""
    #: the evaluated condition read this fact (False: known, listed, not read by the check)
    used: bool = False


class HardwareSource(BaseModel):
    """The hardware profile the answer's facts and replay used, and where it came from:
    ``request`` (``--hardware``, the API's ``hardware``; always wins) or ``log`` (the
    closest profile to the GPUs the log printed; ``evidence`` is that line, ``detail``
    how the profile and its count were chosen), or ``detected`` (``sglang-triage run``
    read the machine's own GPUs with nvidia-smi/rocm-smi; ``evidence`` is the tool's row)."""

    name: str
    source: Literal["request", "log", "detected"]
    evidence: str = ""
    detail: str = ""


class UpgradeFix(BaseModel):
    """Upgrading SGLang as the fix: the located check is gone from ``release`` and every
    later ingested release, or changed there so that the user's values pass it.

    ``status`` is ``removed`` (no check of ``release`` has its condition or message),
    ``passes`` (the changed check evaluates false with the user's flags and facts) or
    ``may_pass`` (it could not be decided statically). ``sure`` holds when every release
    from ``release`` on is ``removed`` and the user's flags all exist there, or when the
    replay of the command on ``release`` passed.
    ``citations`` are the check here, then its lines (or its function) in ``release``.
    ``flags_missing`` are the user's flags ``release`` does not know; ``not_checked``
    says what was not verified; ``replay`` is the replay of the user's command on
    ``release`` when one ran (``verified`` / ``next_failure`` / ``unverified``)."""

    release: str
    status: Literal["removed", "passes", "may_pass"]
    sure: bool
    note: str
    install: str
    command: str
    citations: list[str] = Field(default_factory=list)
    flags_missing: list[str] = Field(default_factory=list)
    not_checked: list[str] = Field(default_factory=list)
    replay: dict[str, Any] | None = None


class NotFlagProblem(BaseModel):
    """No launch flag fixes this crash: it is raised outside SGLang's checks.

    ``kind`` is ``raised_elsewhere`` (the innermost frame is in ``package`` and no
    check of the ``checked_releases`` raises the message) or ``dependency_skew`` (SGLang
    could not import what it needs from ``package``). ``evidence`` are the log's lines
    it rests on, ``citations`` the SGLang call site in the KB when the log shows one."""

    kind: Literal["raised_elsewhere", "dependency_skew"]
    package: str
    reason: str
    evidence: list[str] = Field(default_factory=list)
    citations: list[str] = Field(default_factory=list)
    checked_releases: list[str] = Field(default_factory=list)
    not_checked: list[str] = Field(default_factory=list)


class OnDemandNote(BaseModel):
    """What on-demand ingest did for one answer (``release.on_demand``; written by
    :mod:`service.ondemand`)."""

    release: str
    status: Literal["ingested", "ingesting", "unavailable", "refused", "disabled"]
    seconds: float | None = None
    detail: str
    how: str  # the command that ingests it by hand


class InstalledRelease(BaseModel):
    """The SGLang ``sglang-triage run``/``watch`` found installed (``release.installed``)."""

    version: str | None = None
    location: str | None = None
    commit: str | None = None
    interpreter: str | None = None
    detail: str | None = None


class ReleaseInfo(BaseModel):
    """The answer's ``release``: the engine's release resolution (every field of
    :class:`~service.engine.release.resolve.ReleaseResolution`, its ``candidates`` and
    ``range`` as dumped), then what later steps stamp on it: ``on_demand`` (on-demand
    ingest, which also sets ``method`` to ``on_demand``), and ``installed``, ``source``
    and ``match`` (``run``/``watch``, which set ``method`` to ``installed`` on an exact
    match). The stamped keys are absent until written. The resolution's fields have
    defaults only so that an answer stored by an older version still loads."""

    release: str | None = None
    confidence: float = 0.0
    method: str = "unknown"  # a resolution method, or on_demand | installed
    dev_build: bool = False
    reported_version: str | None = None
    note: str | None = None
    evidence: list[str] = Field(default_factory=list)
    candidates: list[dict[str, Any]] = Field(default_factory=list)
    line_offsets: dict[str, int] = Field(default_factory=dict)
    range: dict[str, Any] | None = None
    elsewhere: dict[str, Any] | MISSING = MISSING
    on_demand: OnDemandNote | MISSING = MISSING
    installed: InstalledRelease | MISSING = MISSING
    source: str | MISSING = MISSING
    match: Literal["exact", "nearest"] | MISSING = MISSING


class LLMSnippet(BaseModel):
    id: str
    kind: str
    citation: str | None


class LLMRejection(BaseModel):
    item: str
    reason: str


class LLMInfo(BaseModel):
    """The language-model assist's account (``llm``; :mod:`service.engine.llm`): always
    ``used``, ``model``, ``method``; the snippets sent; when it answered, what was accepted
    (``explanation``/``summary``, the ranks of ``fixes_added``), cited and rejected;
    ``error`` when nothing was used. Keys of steps that did not run are absent."""

    used: bool
    model: str | None
    method: str
    snippets: list[LLMSnippet] | MISSING = MISSING
    #: the engine's own explanation, when the model's replaced it
    deterministic_explanation: str | MISSING = MISSING
    explanation: Literal["accepted", "rejected"] | MISSING = MISSING
    summary: Literal["accepted", "rejected"] | MISSING = MISSING
    cited: list[str] | MISSING = MISSING
    fixes_added: list[int] | MISSING = MISSING
    agrees_with: list[int] | MISSING = MISSING
    rejected: list[LLMRejection] | MISSING = MISSING
    unverified: list[int] | MISSING = MISSING
    elapsed_ms: float | MISSING = MISSING
    error: str | MISSING = MISSING


class SimilarTriage(BaseModel):
    """A confirmed past triage that failed in the same function (``similar``); ``id`` is
    absent when the caller may not read that triage."""

    id: str | MISSING = MISSING
    release: str | None
    summary: str | None
    confirmed_fix: Any
    note: str
    confirmed_at: str | None


class FixSearch(BaseModel):
    """The replay-backed fix search (``fix_search``; :mod:`service.replay.fix_search`):
    ``status`` (verified | rejected | unverified | background | skipped), the number of
    ``candidates`` replayed, ``detail``; ``seconds`` once replay ran; ``release``,
    ``hardware`` and ``not_replayed`` (left at the deadline) once its verdicts re-ranked
    the fixes."""

    status: Literal["verified", "rejected", "unverified", "background", "skipped"]
    candidates: int
    detail: str
    seconds: float | MISSING = MISSING
    release: str | MISSING = MISSING
    hardware: str | None | MISSING = MISSING
    not_replayed: int | MISSING = MISSING


class TriageResult(BaseModel):
    id: str | None = None
    status: Literal["located", "argparse", "unlocated"]
    summary: str
    explanation: str
    confidence: float
    release: ReleaseInfo
    parsed: ParsedSummary
    location: Location | None = None
    check: CheckInfo | None = None
    evaluation: EvaluationOut | None = None
    fixes: list[FixOut] = Field(default_factory=list)
    no_flag_fix: str | None = None
    references: list[Reference] = Field(default_factory=list)
    unknowns: list[UnknownFact] = Field(default_factory=list)
    citations: list[str] = Field(default_factory=list)
    degraded: list[str] = Field(default_factory=list)
    llm: LLMInfo | None = None
    replay: dict[str, Any] | None = None
    similar: list[SimilarTriage] = Field(default_factory=list)
    #: the check (or flag) in the ingested releases after the diagnosed one
    later_releases: list[ReleaseChange] = Field(default_factory=list)
    upgrade: str | None = None  # "upgrading to ≥ X removes this check (...)", when grounded
    #: upgrading as the fix, when the check is gone (or passes) in later ingested releases;
    #: the answer's first recommendation when ``upgrade_fix.sure``
    upgrade_fix: UpgradeFix | None = None
    #: the crash is raised outside SGLang's checks (another package, a version skew)
    not_flag_problem: NotFlagProblem | None = None
    #: the rule a bare assert enforces, in one plain sentence derived from its condition and
    #: guards (citations in ``citations``)
    rule: str | None = None
    #: facts about the checkpoint that the answer used
    model_facts: list[ModelFact] = Field(default_factory=list)
    #: the check's arithmetic in plain words, with the crash's values and the recommended fix's
    arithmetic: str | None = None
    #: values the crash message printed, read into the evaluation (see :class:`PrintedValue`)
    printed: list[PrintedValue] = Field(default_factory=list)
    #: the hardware profile used (``parsed.hardware`` names it) and its source
    hardware: HardwareSource | None = None
    #: the replay-backed fix search (see :class:`FixSearch`)
    fix_search: FixSearch | None = None
    timings_ms: dict[str, float] = Field(default_factory=dict)
