"""A ``not_applicable`` verdict rests on its false ``when`` operand alone: its record serves
every command for which that operand is false, whatever the operands evaluated before it
read; and a record keeps by value what its verdict does not show
(:mod:`service.engine.rules.card_records`)."""

from __future__ import annotations

from kb.rules.cards import Card
from kb.store import Store
from service.engine.cache import clear_all
from service.engine.rules import card_memo, card_records
from service.engine.rules.card_verdict import when_operands
from service.engine.rules.checker import evaluate_cards, facts_for, prepare_flags
from tests.service.engine.counting import calls_of
from tests.service.engine.rules.judging import judging

SEED_CITATION = "0.5.11:sglang/srt/server_args.py:ServerArgs._handle_speculative_decoding:3519-3522"


def _card(when: str) -> Card:
    return Card(
        id="c-test-narrow",
        title="a probe with two when operands",
        releases="==0.5.23",
        when=when,
        require="args.page_size == 1",
        severity="error",
        message="m",
        citations=[SEED_CITATION],
        origin="curated",
    )


def test_not_applicable_keeps_no_inputs_and_names_its_false_operand(store: Store) -> None:
    # operands run innermost (last) first: ``tp_size > 1`` holds, the dtype test is false
    card = _card("args.kv_cache_dtype == 'fp8_e4m3' and args.tp_size > 1")
    assert when_operands(card.when)[0] == "args.tp_size > 1"
    attrs, parsed = prepare_flags(store, "0.5.23", ["--model-path", "/m", "--tp", "2"])
    (result,) = evaluate_cards(store, "0.5.23", attrs, {}, parsed, cards=[card])
    assert result.verdict == "not_applicable" and result.reason == "`when` is false"
    assert result.operand == "args.kv_cache_dtype == 'fp8_e4m3'"
    assert result.inputs == [] and result.notes == []
    assert card_records.narrowed(result) == result.operand
    # served from that record: another false operand, the same verdict
    attrs, parsed = prepare_flags(store, "0.5.23", ["--model-path", "/m", "--tp", "1"])
    (served,) = evaluate_cards(store, "0.5.23", attrs, {}, parsed, cards=[card])
    assert (served.verdict, served.operand) == ("not_applicable", result.operand)
    # judged afresh, false at the first operand run: nothing else was read, nothing to narrow
    clear_all()
    attrs, parsed = prepare_flags(store, "0.5.23", ["--model-path", "/m", "--tp", "1"])
    (first,) = evaluate_cards(store, "0.5.23", attrs, {}, parsed, cards=[card])
    assert first.operand == "args.tp_size > 1" and card_records.narrowed(first) is None


def test_record_of_the_false_operand_serves_other_values_of_earlier_ones(
    store: Store, monkeypatch
) -> None:
    card = _card("args.kv_cache_dtype == 'fp8_e4m3' and args.tp_size > 1")
    monkeypatch.setattr("service.engine.rules.release_cards.load_curated", lambda: [card])
    commands = [["--model-path", "/m", "--tp", str(tp)] for tp in (2, 4, 8)]
    commands.append(["--model-path", "/m", "--tp", "2", "--kv-cache-dtype", "fp8_e4m3"])
    run, judged = judging(store, "0.5.23", {}, commands, monkeypatch)

    def probe(verdicts: list[list[tuple]]) -> list[tuple]:
        return [next(v for v in per if v[0] == card.id) for per in verdicts]

    narrow = run()
    narrow_judged = judged[0]
    monkeypatch.setattr(card_records, "narrowed", lambda result: None)
    assert run() == narrow
    # tp 4 and tp 8 found the record of tp 2's false dtype test; fp8_e4m3 is judged
    assert narrow_judged < judged[0]
    verdicts = [v[1] for v in probe(narrow)]
    assert verdicts[:3] == ["not_applicable"] * 3 and verdicts[3] != "not_applicable"


def test_narrow_records_give_fresh_verdicts_on_a_release(store: Store, monkeypatch) -> None:
    """On 0.5.23's cards, a series of fix-like commands under a GPU: with the records of
    false operands every verdict (reason, inputs, notes) equals the run without them, and
    fewer cards are judged."""
    facts = facts_for("h100-x8", None, "/models/Qwen3-8B")
    base = ["--model-path", "/models/Qwen3-8B", "--tp", "2"]
    commands = [
        base + ["--attention-backend", backend, "--kv-cache-dtype", dtype]
        for backend in ("triton", "flashinfer", "fa3")
        for dtype in ("auto", "fp8_e4m3")
    ]
    run, judged = judging(store, "0.5.23", facts, commands, monkeypatch)
    narrow = run()
    with_narrow = judged[0]
    monkeypatch.setattr(card_records, "narrowed", lambda result: None)
    assert run() == narrow
    assert 0 < with_narrow < judged[0]


def _verdict(store: Store, card: Card, argv: list[str], facts) -> tuple:
    attrs, parsed = prepare_flags(store, "0.5.23", ["--model-path", "/m", *argv])
    (r,) = evaluate_cards(store, "0.5.23", attrs, facts, parsed, cards=[card])
    return r.verdict, r.reason, r.inputs, r.notes


def test_a_record_keeps_by_value_what_its_verdict_does_not_show(store: Store, monkeypatch) -> None:
    """A card that does not apply shows no inputs, one that holds those of ``require``: the
    same value given another way (a default, a flag, another spelling), or a fact of the
    same value from another GPU profile, read only by ``when``, finds the record."""
    clear_all()
    judged = calls_of(monkeypatch, card_records, "judge_card")
    card = _card("args.tp_size == 3")
    given = [_verdict(store, card, argv, {}) for argv in ([], ["--tp", "1"], ["--tp-size", "1"])]
    assert judged[0] == 1 and {v[0] for v in given} == {"not_applicable"}
    gpu = _card("is_sm100_supported() and args.tp_size > 1")
    h100, h200 = facts_for("h100-x8", None, "/m"), facts_for("h200-x8", None, "/m")
    assert h100["is_sm100_supported()"] != h200["is_sm100_supported()"]  # the provenance
    served = _verdict(store, gpu, ["--tp", "2"], h100), _verdict(store, gpu, ["--tp", "2"], h200)
    assert judged[0] == 2 and served[0] == served[1]
    clear_all()  # judged afresh under the H200: the same verdict
    assert _verdict(store, gpu, ["--tp", "2"], h200) == served[1] and judged[0] == 3
    # a value that differs still misses the record; the card then holds, showing only
    # the page size: another Blackwell profile finds that record
    b200, b300 = facts_for("b200-x8", None, "/m"), facts_for("b300-x8", None, "/m")
    held = _verdict(store, gpu, ["--tp", "2", "--page-size", "1"], b200)
    assert judged[0] == 4 and held[0] == "satisfied"
    assert [name for name, _, _ in held[2]] == ["page_size"]
    assert _verdict(store, gpu, ["--tp", "4", "--page-size", "1"], b300) == held
    assert judged[0] == 5  # tp 4 is read exactly by `when`: judged
    assert _verdict(store, gpu, ["--tp", "2", "--page-size", "1"], b300) == held
    assert judged[0] == 5  # the same values, the fact from another profile: served


def test_view_records_serve_candidates_whose_folds_agree(store: Store, monkeypatch) -> None:
    """Fix candidates giving ``--kv-cache-dtype`` each value: the folded writes test the
    flag against every literal, so records of the flags as given miss, while the folded
    values the derived cards read mostly agree. With view records every verdict (reason,
    inputs, notes) equals the run without them, and fewer cards are judged."""
    facts = facts_for("h200-x8", None, "/models/Kimi-K2.6")
    base = ["--model-path", "/models/Kimi-K2.6", "--tp", "8", "--attention-backend", "fa3"]
    commands = [base] + [
        [*base, "--kv-cache-dtype", dtype] for dtype in ("fp8_e4m3", "fp8_e5m2", "bf16", "auto")
    ]
    run, judged = judging(store, "0.5.23", facts, commands, monkeypatch)
    viewed = run()
    with_view = judged[0]
    monkeypatch.setattr(card_memo, "view_served", lambda *args: None)
    assert run() == viewed
    assert 0 < with_view < judged[0]


def test_view_records_of_verdicts_showing_values_serve_other_choices(
    store: Store, monkeypatch
) -> None:
    """Fix candidates giving a backend flag each of its choices: a derived card that holds
    (or cannot tell) shows the backend among its inputs, so its view record kept the value
    exactly and each choice was judged afresh. Kept by the answers to the card's own tests,
    the record serves every choice answering them alike, its inputs showing the choice of
    the command served: every verdict (reason, inputs, notes) equals the run with exact
    records, and fewer cards are judged."""
    model = "/models/meta-llama/Llama-3.1-8B-Instruct"
    facts = facts_for("h200-x8", None, model)
    base = ["--model-path", model, "--kv-cache-dtype", "nvfp4"]
    base += ["--prefill-attention-backend", "trtllm_mha", "--disaggregation-mode", "decode"]
    commands = [base] + [
        [*base, "--decode-attention-backend", backend]
        for backend in ("triton", "torch_native", "flex_attention", "flashinfer")
    ]
    run, judged = judging(store, "0.5.23", facts, commands, monkeypatch)
    with monkeypatch.context() as exactly:
        exactly.setattr(card_records, "shown_tests", lambda *args: {})
        exact = run()
        exact_judged = judged[0]
    served = calls_of(monkeypatch, card_records, "rebased")
    assert run() == exact
    assert served[0] > 0  # records kept by their tests served some commands
    assert 0 < judged[0] < exact_judged
