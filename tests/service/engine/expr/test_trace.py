"""FactsTrace records what an evaluation reads of the facts, and reads_match tells whether
other facts answer those reads alike (the basis of the memo tables keyed on facts read)."""

from __future__ import annotations

from service.engine.expr.interpreter import Env, Provenance, Value, evaluate
from service.engine.expr.trace import FactsTrace, reads_match, values_only

H100 = Provenance("fact", "hardware profile h100-x8")
H200 = Provenance("fact", "hardware profile h200-x8")


def _facts(prov: Provenance, mem: int, sm100: bool = False) -> dict[str, Value]:
    return {
        "is_sm100_supported()": Value(sm100, prov),
        "gpu_mem": Value(mem, prov),
        "model_arch": Value("LlamaForCausalLM", Provenance("fact", "model")),
    }


def test_an_evaluation_records_only_the_facts_it_reads() -> None:
    trace = FactsTrace(_facts(H100, 81920))
    res = evaluate("is_sm100_supported() and self.tp_size > 1", Env({}, trace))
    assert res.truth is False
    assert trace.reads == {("=+", "is_sm100_supported()"): ("False", "fact", H100.detail)}
    # another GPU of the same generation answers alike; one of another does not
    same = _facts(H200, 144384)
    assert not reads_match(tuple(trace.reads.items()), same, {})  # provenance differs
    trace.provenance = False
    trace.reads.clear()
    evaluate("is_sm100_supported()", Env({}, trace))
    reads = tuple(trace.reads.items())
    assert reads_match(reads, same, {})
    assert not reads_match(reads, _facts(H200, 144384, sm100=True), {})


def test_values_only_reads_answer_alike_what_a_trace_without_provenance_reads() -> None:
    trace = FactsTrace(_facts(H100, 81920))
    evaluate("is_sm100_supported() or is_hip() or 'gpu_mem' in facts_keys", Env({}, trace))
    assert "model_arch" in trace
    full = trace.snapshot()
    plain = FactsTrace(_facts(H100, 81920))
    plain.provenance = False
    evaluate("is_sm100_supported() or is_hip() or 'gpu_mem' in facts_keys", Env({}, plain))
    assert "model_arch" in plain
    assert values_only(full) == plain.snapshot()  # absences and memberships kept as they are
    same = _facts(H200, 144384)
    assert not reads_match(full, same, {}) and reads_match(values_only(full), same, {})
    assert not reads_match(values_only(full), _facts(H200, 1, sm100=True), {})


def test_membership_absence_and_the_whole_key_set_are_reads_too() -> None:
    facts = _facts(H100, 81920)
    trace = FactsTrace(facts)
    assert "gpu_mem" in trace and "is_npu()" not in trace
    assert trace.get("is_hip()") is None
    reads = tuple(trace.reads.items())
    other = {**facts, "gpu_mem": Value(1, H100)}
    assert reads_match(reads, other, {})  # membership of gpu_mem only, not its value
    assert not reads_match(reads, {**facts, "is_npu()": Value(False, H100)}, {})
    assert not reads_match(reads, {**facts, "is_hip()": Value(False, H100)}, {})
    list(trace)  # iterating: the key set itself was read
    assert not reads_match(tuple(trace.reads.items()), {**facts, "x": Value(1, H100)}, {})


def test_a_frame_isolates_and_replays_the_reads_of_a_memoised_part() -> None:
    trace = FactsTrace(_facts(H100, 81920))
    trace.get("model_arch")
    saved = trace.frame()
    trace.get("gpu_mem")
    inner = trace.merge(saved)
    assert [k for k, _ in inner] == [("=+", "gpu_mem")]
    assert set(trace.reads) == {("=+", "model_arch"), ("=+", "gpu_mem")}
    again = FactsTrace(_facts(H100, 81920))
    again.replay(inner)  # a memo hit records what the reused answer had read
    assert set(again.reads) == {("=+", "gpu_mem")}
    assert again.answers_alike(inner)


def test_equal_reads_are_stored_once() -> None:
    """Memo tables keep a read tuple per entry: equal ones are one object."""
    a, b = FactsTrace(_facts(H100, 81920)), FactsTrace(_facts(H100, 81920))
    for t in (a, b):
        t.get("gpu_mem")
        assert "model_arch" in t
    assert a.snapshot() is b.snapshot()
    assert a.snapshot()[0][0] is b.snapshot()[0][0]  # the questions too


def test_membership_answers_of_a_build_replay_as_reads() -> None:
    """What :func:`~service.engine.cache.cached_on_members_seen` returns (names asked, or
    the whole set) becomes reads that other facts answer alike or not; taking the key set
    for a cache key records nothing."""
    from service.engine.cache import WHOLE_QUESTION
    from service.engine.expr.trace import member_reads

    facts = _facts(H100, 81920)
    trace = FactsTrace(facts)
    assert trace.key_set() == frozenset(facts) and trace.reads == {}
    asked = member_reads([("gpu_mem", True), ("is_sm90_supported()", False)])
    assert asked is member_reads([("gpu_mem", True), ("is_sm90_supported()", False)])
    trace.replay(asked)
    assert reads_match(trace.snapshot(), _facts(H200, 144384), {})
    assert not reads_match(trace.snapshot(), {"model_arch": facts["model_arch"]}, {})
    assert not reads_match(member_reads([(WHOLE_QUESTION, frozenset(facts))]), {}, {})


def test_the_facts_answers_are_shared_per_facts_signature(monkeypatch) -> None:
    """Every match and trace under one set of facts shares its answers: a question is
    answered once per set of facts, and the table is emptied (a new token) when large."""
    from service.engine.cache import LRUCache, facts_signature
    from service.engine.expr import trace as trace_mod

    monkeypatch.setattr(trace_mod, "_SHARED", LRUCache("test.facts_answers", 4))  # empty
    facts = _facts(H100, 81920)
    fsig = facts_signature(facts)
    answers = trace_mod.shared_answers(fsig)
    assert trace_mod.shared_answers(fsig) is answers
    assert trace_mod.shared_answers(facts_signature(_facts(H200, 81920))) is not answers
    asked: list[object] = []
    real = trace_mod._answer
    monkeypatch.setattr(trace_mod, "_answer", lambda f, q: asked.append(q) or real(f, q))
    recorded = FactsTrace(facts)
    evaluate("is_sm100_supported() and self.tp_size > 1", Env({}, recorded))
    first, second = tuple(recorded.reads.items()), tuple(dict(recorded.reads).items())
    assert first is not second
    assert reads_match(first, facts, trace_mod.shared_answers(fsig))
    assert reads_match(second, facts, trace_mod.shared_answers(fsig))
    assert len(asked) == 1  # the second set of reads found the answer
    token = FactsTrace(facts, answers).facts_token
    monkeypatch.setattr(trace_mod, "_SHARED_MAX", 1)
    emptied = trace_mod.shared_answers(fsig)
    assert emptied is not answers and emptied == {}
    assert FactsTrace(facts, emptied).facts_token is not token
