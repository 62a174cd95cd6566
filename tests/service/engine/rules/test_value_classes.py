"""A card's verdict serves every model path of its class when the card and its folded
writes use the path only through that class (:mod:`service.engine.rules.value_classes`)."""

from __future__ import annotations

from kb.rules.cards import Card
from kb.store import Store
from service.engine.cache import clear_all
from service.engine.evaluate import fold_slice
from service.engine.evaluate.chain import Write
from service.engine.evaluate.fold_slice import Slice
from service.engine.evaluate.path_classes import CLASSED, class_signature, uses_by_class
from service.engine.evaluate.resolution import PreparedWrite
from service.engine.expr.interpreter import Provenance, Value
from service.engine.expr.trace import FactsTrace
from service.engine.rules import checker
from service.engine.rules.attr_reads import AttrReads, attrs_match
from service.engine.rules.card_verdict import CardResult
from service.engine.rules.checker import evaluate_cards, facts_for, prepare_flags
from service.engine.rules.value_classes import card_classed, folds_classed, rebased


def _path(value: object, flag: str = "--model-path") -> Value:
    return Value(value, Provenance("flag", f"{flag} {value}"))


def _sig(value: object, flag: str = "--model-path", **others: Value) -> object:
    return class_signature({"model_path": _path(value, flag), **others}, "model_path")


def test_paths_of_one_class_sign_alike_and_none_dummy_apart() -> None:
    a, b = _sig("/models/A"), _sig("/data/B-v2")
    assert a == b
    assert _sig("None") == _sig("none")  # .lower() alike
    assert len({a, _sig("none"), _sig("dummy")}) == 3
    assert _sig(None) != a
    assert _sig("/models/A", "--model") != a  # spelled otherwise
    assert class_signature({}, "model_path") == "?"
    assert _sig(3) != _sig(4)  # not text: exact
    draft = "speculative_draft_model_path"
    same = _sig("/m", **{draft: _path("/m", "--speculative-draft-model-path")})
    other = _sig("/m", **{draft: _path("/d", "--speculative-draft-model-path")})
    assert same != other  # which other paths it equals is part of the class
    assert other == _sig("/x", **{draft: _path("/y", "--speculative-draft-model-path")})


def test_only_uses_the_class_decides_keep_the_class() -> None:
    ok = [
        "not args.model_path.lower() in ['none', 'dummy']",
        "cfg.model_path.lower() not in ('none', 'dummy') and cfg.tp_size > 1",
        "self.model_path is not None",
        "get_connector_type(self.model_path) == ConnectorType.INSTANCE",
        "cfg.speculative_draft_model_path in (None, cfg.model_path)",
        "args.model_path != args.speculative_draft_model_path",
        "self.tp_size > 1",  # no use at all
        "self.speculative_draft_model_path",  # a condition: its truth
        "cfg.tp_size > 1 and not cfg.speculative_draft_model_path",
    ]
    bad = [
        "(cfg.speculative_draft_model_path or 'x') == 'x'",  # the value, not its truth
        "args.tokenizer_path in (None, args.model_path)",
        "'deepseek' in args.model_path.lower()",
        "args.model_path.lower() in ['none', 'llama']",
        "args.model_path == 'x'",
        "len(args.model_path) > 3",
        "str(args.model_path).endswith('.gguf')",
        "os.path.exists(self.model_path)",
        "getattr(args, 'model_path') is None",
        "model_path is None",  # a local: origin unknown
    ]
    for text in ok:
        assert uses_by_class([text]), text
    for text in bad:
        assert not uses_by_class([text]), text
    # a write's value: a copy of the path, unless only its truth is taken
    assert not uses_by_class(["self.model_path"], condition=False)
    assert not uses_by_class(["cfg.speculative_draft_model_path or None"], condition=False)
    assert uses_by_class(["not cfg.speculative_draft_model_path"], condition=False)
    assert uses_by_class(["'a' if cfg.speculative_draft_model_path else 'b'"], condition=False)
    assert card_classed("not args.model_path.lower() in ['none', 'dummy']", "True") == CLASSED
    assert card_classed("args.model_path == 'x'", "True") == frozenset()
    # a card helper computes from its argument
    assert card_classed("attn_dp_enabled_of(args.model_path)", "True") == frozenset()
    assert uses_by_class(["attn_dp_enabled_of(args.model_path)"])  # elsewhere: a fact


def _slice(*writes: tuple[str, str, str]) -> Slice:
    """A slice of writes ``(attr, value, guard)``."""
    plan = tuple(
        (
            Write(attr, "sglang/srt/arg_groups/x_hook.py", "f", i, "assign", value, [], 0.0),
            PreparedWrite(value, ((guard, True),), (), True),
        )
        for i, (attr, value, guard) in enumerate(writes, 1)
    )
    return Slice(plan, (), b"", frozenset())


def test_folded_writes_keep_the_class_only_while_paths_stay_paths() -> None:
    draft = "speculative_draft_model_path"
    copy = _slice((draft, "cfg.model_path", "cfg.speculative_algorithm == 'NEXTN'"))
    assert folds_classed([copy], ()) == CLASSED
    compared = _slice(("speculative_num_steps", "1", f"cfg.{draft} in (None, cfg.model_path)"))
    assert folds_classed([copy, compared], ()) == CLASSED
    into_other = _slice(("tokenizer_path", "cfg.model_path", "cfg.tokenizer_path is None"))
    assert folds_classed([copy, into_other], ()) == frozenset()
    constant = _slice((draft, "'lmsys/draft'", "True"))  # the path may equal the constant
    assert folds_classed([constant], ()) == frozenset()
    # a path assigned from a call the interpreter does not compute: unknown, unless a fact
    # of that text answers it
    resolved = _slice(("model_path", "resolve_ref(cfg.model_path, revision=cfg.revision)", "True"))
    key = "resolve_ref(args.model_path, revision=args.revision)"
    trace = FactsTrace({})
    trace.get(key)  # asked, absent
    assert folds_classed([resolved], trace.snapshot()) == CLASSED
    found = FactsTrace({key: Value("/x", Provenance("fact", "t"))})
    found.get(key)
    assert folds_classed([resolved], found.snapshot()) == frozenset()


def test_a_classed_read_matches_any_path_of_the_class() -> None:
    base = {"model_path": _path("/models/A"), "tp_size": Value(2, Provenance("flag", "--tp 2"))}
    read = AttrReads(base)
    read.get("model_path")
    read.get("tp_size")
    recorded = read.snapshot(CLASSED)
    assert [k for k, _ in recorded] == ["model_path#class", "tp_size"]
    assert attrs_match(recorded, {**base, "model_path": _path("/other/B")}, {})
    assert not attrs_match(recorded, {**base, "model_path": _path("dummy")}, {})
    exact = read.snapshot()
    assert not attrs_match(exact, {**base, "model_path": _path("/other/B")}, {})


def test_rebased_shows_the_new_paths_and_refuses_a_text_quoting_an_old_one(
    derived: list[Card],
) -> None:
    card = derived[0]
    origin = (("model_path", "/models/A"),)
    now = {"model_path": _path("/models/B")}
    inputs = [
        ("model_path", "/models/A", "flag: --model-path /models/A"),
        ("speculative_draft_model_path", "/models/A", "derived: copied"),  # a folded copy
    ]
    old = CardResult(card, "not_applicable", "`when` is false", [], inputs)
    new = rebased(old, origin, now)
    assert new is not None and new is not old
    assert new.inputs == [
        ("model_path", "/models/B", "flag: --model-path /models/B"),
        ("speculative_draft_model_path", "/models/B", "derived: copied"),
    ]
    assert old.inputs == inputs  # the record is untouched
    quoting = CardResult(card, "violated", "needs X with model_path='/models/A'", [], inputs)
    assert rebased(quoting, origin, now) is None
    elsewhere = CardResult(card, "satisfied", "ok", [], [("tokenizer_path", "/models/A", "x")])
    assert rebased(elsewhere, origin, now) is None
    assert rebased(old, origin, {"model_path": _path("/models/A")}) is old
    assert rebased(old, (), now) is old


def test_new_model_paths_reuse_verdicts_equal_to_fresh_ones(store: Store, monkeypatch) -> None:
    """Commands differing only in the model path: every verdict (reason, inputs, notes)
    equals a fresh evaluation's, and the classes judge fewer cards and fold fewer slices."""
    release = "0.5.23"
    facts = facts_for("h100-x8", None, "/models/Qwen3-8B")
    tail = ["--tp", "2", "--attention-backend", "triton", "--speculative-algorithm", "NEXTN"]
    paths = ["/models/Qwen3-8B", "/data/qwen3-8b-ft", "/ckpt/Qwen3-8B-v2", "dummy"]
    judged, folded = [0], [0]
    real, real_fold = checker.judge_card, fold_slice.fold_writes

    def counting(*args):
        judged[0] += 1
        return real(*args)

    def counting_folds(*args):
        folded[0] += 1
        return real_fold(*args)

    monkeypatch.setattr(checker, "judge_card", counting)
    monkeypatch.setattr(fold_slice, "fold_writes", counting_folds)

    def run() -> list[list[tuple]]:
        clear_all()
        judged[0] = folded[0] = 0
        out = []
        for path in paths:
            attrs, parsed = prepare_flags(store, release, ["--model-path", path, *tail])
            out.append(
                [
                    (r.card.id, r.verdict, r.reason, r.inputs, r.notes)
                    for r in evaluate_cards(store, release, attrs, facts, parsed)
                ]
            )
        return out

    classed = run()
    with_classes, folds_with_classes = judged[0], folded[0]
    # every verdict served to another path shows that path
    for path, verdicts in zip(paths, classed, strict=True):
        shown = {v for *_, inputs, _ in verdicts for n, v, _ in inputs if n == "model_path"}
        assert shown <= {path}
    monkeypatch.setattr(checker, "card_classed", lambda *args: frozenset())
    monkeypatch.setattr(fold_slice, "writes_info", lambda *args: (False, frozenset()))
    assert run() == classed
    assert 0 < with_classes < judged[0]
    assert 0 < folds_with_classes < folded[0]
