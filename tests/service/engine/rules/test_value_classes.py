"""A card's verdict serves every model path of its class when the card and its folded
writes use the path only through that class, and every value answering its tests alike
when they read a flag only through tests against literals
(:mod:`service.engine.rules.value_classes`)."""

from __future__ import annotations

from kb.rules.cards import Card
from kb.store import Store
from service.engine.cache import clear_all
from service.engine.evaluate import fold_slice, slice_plan
from service.engine.evaluate.chain import Write
from service.engine.evaluate.path_classes import CLASSED, uses_by_class
from service.engine.evaluate.resolution import PreparedWrite
from service.engine.evaluate.slice_plan import Slice
from service.engine.expr.interpreter import Provenance, Value
from service.engine.expr.trace import FactsTrace
from service.engine.rules import card_records
from service.engine.rules.attr_reads import AttrReads, attrs_match
from service.engine.rules.card_verdict import CardResult
from service.engine.rules.checker import evaluate_cards, facts_for, prepare_flags
from service.engine.rules.value_classes import (
    card_classed,
    card_tests,
    folds_classed,
    rebased,
    shown_of,
)
from tests.service.engine.counting import calls_of
from tests.service.engine.evaluate.test_path_classes import _path
from tests.service.engine.rules.judging import judging


def test_card_helpers_count_as_computed() -> None:
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


def test_a_guard_calling_a_chain_with_the_path_keeps_the_class_while_its_prefixes_are_absent() -> (
    None
):
    modelscope = _slice(("tokenizer_path", "None", "not os.path.exists(cfg.model_path)"))
    assert modelscope.paths == (True, frozenset({"os", "os.path"}))
    assert folds_classed([modelscope], ()) == CLASSED
    # a fact answering a prefix: the interpreter would call the method on its value
    trace = FactsTrace({"os.path": Value({}, Provenance("fact", "x"))})
    assert "os.path" in trace
    assert folds_classed([modelscope], trace.snapshot()) == frozenset()
    assert not _slice(("tokenizer_path", "None", "envs.P.get(cfg.model_path)")).paths[0]


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
    # a verdict showing no path is served as it is
    pathless = CardResult(card, "satisfied", "ok", [], [("tp_size", 2, "flag: --tp 2")])
    assert rebased(pathless, origin, now) is pathless
    quoting = CardResult(card, "violated", "needs X with model_path='/models/A'", [], inputs)
    assert rebased(quoting, origin, now) is None
    elsewhere = CardResult(card, "satisfied", "ok", [], [("tokenizer_path", "/models/A", "x")])
    assert rebased(elsewhere, origin, now) is None
    # another path that merely starts with the old one is not rewritten: judged afresh
    draft = ("speculative_draft_model_path", "/models/A/draft", "flag: --x /models/A/draft")
    typed = CardResult(card, "not_applicable", "`when` is false", [], [inputs[0], draft])
    assert rebased(typed, origin, now) is None
    assert rebased(old, origin, {"model_path": _path("/models/A")}) is old
    assert rebased(old, (), now) is old


def test_new_model_paths_reuse_verdicts_equal_to_fresh_ones(store: Store, monkeypatch) -> None:
    """Commands differing only in the model path: every verdict (reason, inputs, notes)
    equals a fresh evaluation's, and the classes judge fewer cards and fold fewer slices."""
    release = "0.5.23"
    facts = facts_for("h100-x8", None, "/models/Qwen3-8B")
    tail = ["--tp", "2", "--attention-backend", "triton", "--speculative-algorithm", "NEXTN"]
    paths = ["/models/Qwen3-8B", "/data/qwen3-8b-ft", "/ckpt/Qwen3-8B-v2", "dummy"]
    judged = calls_of(monkeypatch, card_records, "judge_card")
    folded = calls_of(monkeypatch, fold_slice, "fold_effects")

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
    monkeypatch.setattr(card_records, "card_classed", lambda *args: frozenset())
    monkeypatch.setattr(slice_plan, "writes_info", lambda *args: (False, frozenset()))
    assert run() == classed
    assert 0 < with_classes < judged[0]
    assert 0 < folds_with_classes < folded[0]


def _flag(flag: str, v: object) -> Value:
    return Value(v, Provenance("flag", f"{flag} {v}"))


def test_card_tests_join_the_card_and_its_folded_writes() -> None:
    when = "args.kv_cache_dtype in ('fp8_e4m3', 'fp8_e5m2') and args.tp_size > 1"
    reads = ["kv_cache_dtype", "tp_size", "model_path"]
    choices = frozenset({"kv_cache_dtype", "tp_size"})
    assert card_tests(when, "True", [], reads, frozenset(), choices) == {
        "kv_cache_dtype": (("eq", "fp8_e4m3"), ("eq", "fp8_e5m2")),
        "tp_size": (("eq", 1), ("gt", 1), ("lt", 1)),
    }
    # only attributes with choices are asked for
    assert set(card_tests(when, "True", [], reads, frozenset(), frozenset())) == set()
    # a folded write's guard adds its literal; one copying the value elsewhere drops it
    guard = _slice(("attention_backend", "'triton'", "cfg.kv_cache_dtype == 'auto'"))
    got = card_tests(when, "True", [guard], reads, frozenset(), choices)
    assert got["kv_cache_dtype"] == (("eq", "auto"), ("eq", "fp8_e4m3"), ("eq", "fp8_e5m2"))
    copy = _slice(("kv_cache_dtype_resolved", "cfg.kv_cache_dtype", "True"))
    assert "kv_cache_dtype" not in card_tests(when, "True", [copy], reads, frozenset(), choices)


def test_a_tested_read_matches_every_value_answering_its_tests() -> None:
    base = {"kv_cache_dtype": Value("auto", Provenance("default", "")), "tp_size": _flag("--tp", 2)}
    read = AttrReads(base)
    read.get("kv_cache_dtype")
    read.get("tp_size")
    tests = {"kv_cache_dtype": (("eq", "fp8_e4m3"),)}
    recorded = read.snapshot(frozenset(), tests)
    assert recorded[0][0].startswith("kv_cache_dtype#tests") and recorded[1][0] == "tp_size"
    # another value the test answers alike, given another way
    assert attrs_match(recorded, {**base, "kv_cache_dtype": _flag("--kv-cache-dtype", "bf16")}, {})
    assert not attrs_match(
        recorded, {**base, "kv_cache_dtype": _flag("--kv-cache-dtype", "fp8_e4m3")}, {}
    )
    assert not attrs_match(recorded, {**base, "tp_size": _flag("--tp", 4)}, {})


def test_rebased_shows_the_tested_value_as_now_given(derived: list[Card]) -> None:
    card = derived[0]
    then = {"kv_cache_dtype": Value("auto", Provenance("default", ""))}
    now = {"kv_cache_dtype": _flag("--kv-cache-dtype", "bf16")}
    shown = shown_of({"kv_cache_dtype": ()}, then)
    given = CardResult(
        card, "not_applicable", "`when` is false", [], [("kv_cache_dtype", "auto", "default")]
    )
    served = rebased(given, (), now, shown)
    assert served is not None
    assert served.inputs == [("kv_cache_dtype", "bf16", "flag: --kv-cache-dtype bf16")]
    # written back to itself by a resolution step: the write's detail shows the new value
    resolved = ("kv_cache_dtype", "auto", "write: set to 'auto' at x_hook.py:3 because y")
    served = rebased(CardResult(card, "not_applicable", "w", [], [resolved]), (), now, shown)
    assert served is not None
    assert served.inputs == [
        ("kv_cache_dtype", "bf16", "write: set to 'bf16' at x_hook.py:3 because y")
    ]
    # a literal folded in (the same for both values) stays
    literal = ("kv_cache_dtype", "fp8_e4m3", "write: set to 'fp8_e4m3' at x_hook.py:3")
    served = rebased(CardResult(card, "not_applicable", "w", [], [literal]), (), now, shown)
    assert served is not None and served.inputs == [literal]
    # the old value with a detail that cannot be told apart, or a reason quoting it
    odd = ("kv_cache_dtype", "auto", "derived: something")
    assert rebased(CardResult(card, "not_applicable", "w", [], [odd]), (), now, shown) is None
    quoting = CardResult(card, "violated", "m — with kv_cache_dtype='auto' (default)", [], [])
    assert rebased(quoting, (), now, shown) is None
    assert rebased(given, (), then, shown) is given


def test_new_backend_values_reuse_verdicts_equal_to_fresh_ones(store: Store, monkeypatch) -> None:
    """Commands differing only in a dtype and a backend: every verdict (reason, inputs,
    notes) equals a fresh evaluation's, and the tests judge fewer cards."""
    facts = facts_for("h100-x8", None, "/models/Qwen3-8B")
    commands = [
        ["--model-path", "/models/Qwen3-8B", "--tp", "2", "--kv-cache-dtype", dtype]
        + ["--attention-backend", backend]
        for dtype in ("auto", "bf16", "fp8_e5m2", "bfloat16")
        for backend in ("triton", "flashinfer", "fa3")
    ]
    run, judged = judging(store, "0.5.23", facts, commands, monkeypatch)
    tested = run()
    with_tests = judged[0]
    monkeypatch.setattr(card_records, "card_tests", lambda *args: {})
    assert run() == tested
    assert 0 < with_tests < judged[0]


def test_the_card_memo_serves_a_verdict_to_every_path_of_its_class(
    store: Store, monkeypatch
) -> None:
    """A verdict the per-card memo holds for one model path serves a command that differs
    from that one in the path alone (a path of the same class, under a base command that
    differs more): fewer cards go on to the records, the view records or a fresh judging
    than with a memo that serves the path it was judged with alone, and every verdict
    (reason, inputs, notes) is the same."""
    from service.engine.rules import card_memo

    release = "0.5.23"
    facts = facts_for("h100-x8", None, "/models/Qwen3-8B")
    tail = ["--attention-backend", "triton", "--speculative-algorithm", "NEXTN"]
    commands = [
        ["--model-path", "/models/Qwen3-8B", "--tp", "2", *tail],
        ["--model-path", "/models/Qwen3-8B", "--tp", "4", "--kv-cache-dtype", "bf16"],
        ["--model-path", "/data/qwen3-8b-ft", "--tp", "2", *tail],
    ]
    beyond = [
        calls_of(monkeypatch, card_memo, "attrs_match"),
        calls_of(monkeypatch, card_memo, "view_served"),
        calls_of(monkeypatch, card_records, "judge_card"),
    ]

    def run() -> tuple[list[tuple], int]:
        """From cold caches: the last command's verdicts, and how many lookups and
        judgings past the memo it took."""
        clear_all()
        for argv in commands:
            for counter in beyond:
                counter[0] = 0
            attrs, parsed = prepare_flags(store, release, argv)
            results = evaluate_cards(store, release, attrs, facts, parsed)
        verdicts = [(r.card.id, r.verdict, r.reason, r.inputs, r.notes) for r in results]
        return verdicts, sum(c[0] for c in beyond)

    by_class, past_memo = run()
    shown = {v for *_, inputs, _ in by_class for n, v, _ in inputs if n == "model_path"}
    assert shown == {"/data/qwen3-8b-ft"}
    real = card_memo._memo_served

    def own_path_only(variants, paths, *args):
        return real(tuple(v for v in variants if v[3] == paths), paths, *args)

    monkeypatch.setattr(card_memo, "_memo_served", own_path_only)
    by_path, past_memo_by_path = run()
    assert by_path == by_class
    assert past_memo < past_memo_by_path
