"""Locating a check from an exception message alone (real releases in the KB)."""

from __future__ import annotations

import threading

import pytest

from service.engine.locate.message import (
    MESSAGE_MIN,
    MessageTemplate,
    match_message,
    message_pattern,
    split_exception_prefix,
)
from service.engine.locate.message import match as lm
from service.engine.locate.message.align import align, score_alignment, type_factor

TRTLLM = "trtllm_mha backend only supports topk = 1 for speculative decoding."
TBO_USER = (
    "When enabling two batch overlap without an EP a2a backend (moe_a2a_backend='none'),\n"
    "--enable-dp-attention is required (DeepSeek-V4 non-EP DP TBO path)."
)


@pytest.fixture(scope="module")
def store(kb):
    return kb.store


# --------------------------------------------------------------------------- templates


@pytest.mark.parametrize(
    ("src", "fragments"),
    [
        ('"plain text"', ["plain text"]),
        ("'single quoted'", ["single quoted"]),
        ('r"raw \\d text"', ["raw \\d text"]),
        ('"a" "b" \'c\'', ["abc"]),
        ('(\n    "wrapped "\n    "message"\n)', ["wrapped message"]),
        ('f"x {y} z"', ["x ", " z"]),
        ('f"x {y!r:>10} z {{lit}}"', ["x ", " z {lit}"]),
        ('f"{a}{b} tail"', ["", " tail"]),
        ('f"{value=} is bad"', ["value=", " is bad"]),
        ('f"head {a}" "mid " f"{b}"', ["head ", "mid ", ""]),
        (
            '"got %s and %d (%r), %(name)s; 100%%" % (a, b, c)',
            ["got ", " and ", " (", "), ", "; 100%"],
        ),
        ('"{} and {0} and {name} {{x}}".format(a, b, name=c)', ["", " and ", " and ", " {x}"]),
        ('"prefix " + str(x) + " suffix"', ["prefix ", " suffix"]),
        ('"a: " + ", ".join(items)', ["a: ", ""]),
        ('"multi\\n  line\\tliteral"', ["multi line literal"]),
    ],
)
def test_message_pattern_literal_forms(src: str, fragments: list[str]) -> None:
    tpl = message_pattern(src)
    assert tpl is not None
    assert tpl.fragments == fragments
    assert tpl.literal_chars == sum(len(f) for f in fragments)
    assert tpl.text == "{…}".join(fragments)


@pytest.mark.parametrize(
    "src",
    [
        "msg",
        "self._message()",
        'b"bytes"',
        '"a" if c else "b"',
        "(name, target)",
        'f"{a}{b}"',
        "a + b",
        "",
        "not python (",
        '"{unclosed".format(x)',
    ],
)
def test_message_pattern_rejects_non_literals(src: str) -> None:
    assert message_pattern(src) is None


def test_template_regex_matches_renderings() -> None:
    tpl = message_pattern('f"Tensor parallel size {tp} is greater than "\n f"the number {n}."')
    assert tpl is not None and tpl.placeholders == 2
    assert tpl.regex.fullmatch("Tensor parallel size 8 is greater than the number 4.")
    assert tpl.regex.fullmatch("Tensor parallel size 8 is\n greater than the number 4.")
    assert not tpl.regex.fullmatch("Tensor parallel size 8 is smaller than the number 4.")


def test_split_exception_prefix() -> None:
    assert split_exception_prefix("ValueError: boom") == ("ValueError", "boom")
    assert split_exception_prefix("torch.OutOfMemoryError: x") == ("OutOfMemoryError", "x")
    assert split_exception_prefix("note: not an error") == (None, "note: not an error")


def test_type_factor() -> None:
    assert type_factor(None, "raise", "ValueError") == 1.0
    assert type_factor("ValueError", "raise", "ValueError") == 1.0
    assert type_factor("AssertionError", "assert", "AssertionError") == 1.0
    assert type_factor("NotImplementedError", "raise", "RuntimeError") == 0.85
    assert type_factor("ValueError", "raise", "MyCustomError") == 0.75
    assert type_factor("AssertionError", "raise", "ValueError") == 0.5


# --------------------------------------------------------------------------- real KB


def test_trtllm_message_in_0_5_11(store) -> None:
    matches = match_message(store, "0.5.11", TRTLLM, exc_type="ValueError")
    top = matches[0]
    assert top.path == "sglang/srt/server_args.py"
    assert top.function.startswith("ServerArgs.")
    assert (top.kind, top.exc_type, top.match_kind, top.score) == (
        "raise",
        "ValueError",
        "full",
        1.0,
    )
    assert top.template == TRTLLM


def test_trtllm_message_in_0_5_23(store) -> None:
    matches = match_message(store, "0.5.23", "ValueError: " + TRTLLM)
    top = matches[0]
    assert top.path == "sglang/srt/arg_groups/speculative_hook.py"
    assert top.function == "_handle_eagle_family"
    assert top.score == 1.0
    rows = store.checks("0.5.23", where="id = ?", params=(top.check_id,))
    assert rows and TRTLLM in rows[0].message


def _fstring_raise(store, release: str) -> tuple[dict, MessageTemplate]:
    """A ValueError raise with an f-string message in server_args.py (else in arg_groups/,
    where later releases moved the ServerArgs checks)."""
    for scope in ("path = 'sglang/srt/server_args.py'", "path LIKE 'sglang/srt/arg_groups/%'"):
        rows = store.checks(
            release,
            where="kind = 'raise' AND exc_type = 'ValueError' AND (message LIKE 'f%' OR "
            f"message LIKE '(%f\"%') AND {scope}",
        )
        for row in rows:
            tpl = message_pattern(row.message)
            if (
                tpl is not None
                and tpl.placeholders >= 1
                and tpl.literal_chars >= 40
                and tpl.fragments[0]
                and tpl.fragments[-1]
            ):
                return row, tpl
    pytest.fail(f"no f-string ValueError among the ServerArgs checks of {release}")


@pytest.mark.parametrize("release", ["0.5.11", "0.5.23"])
def test_fstring_message_with_values_filled_in(store, release: str) -> None:
    row, tpl = _fstring_raise(store, release)
    message = "XYZ_9000".join(tpl.fragments)
    matches = match_message(store, release, message, exc_type="ValueError", limit=20)
    assert matches
    best = matches[0].score
    hit = next(m for m in matches if m.check_id == row.id)
    assert hit.score == best and hit.match_kind == "full"
    assert hit.values == ["XYZ_9000"] * tpl.placeholders
    assert hit.score == pytest.approx(tpl.literal_chars / len(message), abs=1e-3)
    # the same message wrapped over several lines by a terminal
    words = message.split(" ")
    wrapped = "\n".join(" ".join(words[i : i + 5]) for i in range(0, len(words), 5))
    again = match_message(store, release, wrapped, exc_type="ValueError", limit=20)
    assert any(m.check_id == row.id and m.score == hit.score for m in again)


def test_two_line_tbo_message(store) -> None:
    exact = store.checks(
        "0.5.23",
        where="message LIKE ?",
        params=("%--enable-dp-attention is required (DeepSeek-V4%",),
    )
    matches = match_message(store, "0.5.23", TBO_USER, exc_type="ValueError")
    if exact:
        assert matches[0].check_id == exact[0].id and matches[0].score >= 0.9
        return
    # 0.5.23 reworded the check: only a low-score "diverged" match may come back
    assert all(m.score < 0.5 for m in matches)
    reworded = store.checks(
        "0.5.23",
        where="message LIKE ?",
        params=("%When enabling two batch overlap without an EP a2a%",),
    )
    if reworded and matches:
        assert matches[0].check_id == reworded[0].id
        assert matches[0].match_kind == "diverged"
        # its own (reworded) text, wrapped over two lines, is a full match
        tpl = message_pattern(reworded[0].message)
        assert tpl is not None
        text = tpl.text.replace(" attention DP", "\nattention DP")
        own = match_message(store, "0.5.23", text, exc_type="ValueError")
        assert own[0].check_id == reworded[0].id and own[0].score == 1.0


def test_exception_type_mismatch_is_penalised(store) -> None:
    right = match_message(store, "0.5.23", TRTLLM, exc_type="ValueError")[0]
    base = match_message(store, "0.5.23", TRTLLM, exc_type="Exception")[0]
    wrong = match_message(store, "0.5.23", TRTLLM, exc_type="AssertionError")[0]
    assert right.check_id == base.check_id == wrong.check_id
    assert right.score > base.score > wrong.score > 0


def test_assert_message_prefers_assert_checks(store) -> None:
    rows = store.checks(
        "0.5.23",
        where="kind = 'assert' AND message LIKE '\"%' "
        "AND length(message) > 60 AND message NOT LIKE '%{%'",
    )
    assert rows
    tpl = message_pattern(rows[0].message)
    assert tpl is not None
    matches = match_message(store, "0.5.23", tpl.text, exc_type="AssertionError")
    hit = next(m for m in matches if m.check_id == rows[0].id)
    assert hit.score == 1.0 and hit.kind == "assert"


def test_truncated_message_is_a_partial_match(store) -> None:
    msg = (
        "ValueError: Speculative decoding for Qwen3_5MoeForConditionalGeneration is not "
        "compatible with radix cache when using --mamba-scheduler-strategy no_buffer."
    )
    matches = match_message(store, "0.5.11", msg)
    top = matches[0]
    assert top.function == "ServerArgs._handle_mamba_radix_cache"
    assert top.match_kind == "truncated"
    assert 0.3 < top.score < 0.9


def test_message_cut_at_the_start_is_an_inner_match(store) -> None:
    row, tpl = _fstring_raise(store, "0.5.23")
    message = "VAL".join(tpl.fragments)
    tail = message[len(message) // 3 :]
    matches = match_message(store, "0.5.23", tail, limit=30)
    hit = next(m for m in matches if m.check_id == row.id)
    assert hit.match_kind in ("inner", "full") and hit.score < 1.0


def test_unrelated_message_finds_nothing(store) -> None:
    assert match_message(store, "0.5.23", "zq zq zq this text appears in no sglang release") == []
    assert match_message(store, "0.5.23", "short") == []


#: Templates one lookup may align the message with: the anchors of its words (a handful)
#: and the partial candidates from the postings of its rarest words.
_ALIGN_BOUND = 2 * lm._PARTIAL_CANDIDATES


def _count_work(store, monkeypatch) -> tuple[list[str], list[int]]:
    """From now on, record the SQL ``store`` runs and the length of each message aligned."""
    sqls: list[str] = []
    aligned: list[int] = []
    query, align = store.query, lm.align

    def counting_query(sql: str, params=()):
        sqls.append(sql)
        return query(sql, params)

    def counting_align(frags, msg):
        aligned.append(len(msg))
        return align(frags, msg)

    monkeypatch.setattr(store, "query", counting_query)
    monkeypatch.setattr(lm, "align", counting_align)
    return sqls, aligned


def test_index_is_built_once_and_warm_lookups_reuse_it(store, monkeypatch) -> None:
    """Four threads asking a cold release build its index once (the others wait for it);
    a warm lookup then reads one release row, never the checks, and aligns the message
    only with the templates its words point at, not with every template of the release."""
    key_prefix = (str(store.path), "0.5.9")
    with lm._lock:
        for key in [k for k in lm._indexes if k[:2] == key_prefix]:
            del lm._indexes[key]
    builds: list[str] = []
    build = lm._build

    def counting_build(store_, release):
        builds.append(release)
        return build(store_, release)

    monkeypatch.setattr(lm, "_build", counting_build)
    results: list[list[int]] = []

    def run() -> None:
        results.append([m.check_id for m in match_message(store, "0.5.9", TRTLLM)])

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4 and all(r == results[0] and r for r in results)
    assert builds == ["0.5.9"]

    expected = match_message(store, "0.5.23", TRTLLM)  # warm
    index = lm._indexes[(str(store.path), "0.5.23", str(store.require("0.5.23")["content_hash"]))]
    builds.clear()
    sqls, aligned = _count_work(store, monkeypatch)
    for _ in range(10):
        assert match_message(store, "0.5.23", TRTLLM) == expected
    assert builds == []
    assert len(sqls) <= 10 and not any("FROM checks" in q for q in sqls), sqls
    assert len(aligned) <= 10 * _ALIGN_BOUND < len(index.entries), len(aligned)


def test_long_message_is_bounded(store, monkeypatch) -> None:
    """Only the first MAX_MESSAGE_CHARS characters of a message are aligned with templates,
    and with no more of them than for a short message."""
    msg = TRTLLM + " " + "x" * 50_000
    expected = match_message(store, "0.5.23", msg[: lm.MAX_MESSAGE_CHARS])
    _, aligned = _count_work(store, monkeypatch)
    assert match_message(store, "0.5.23", msg) == expected
    assert aligned and max(aligned) <= lm.MAX_MESSAGE_CHARS
    assert len(aligned) <= _ALIGN_BOUND


def test_a_printed_list_fills_a_placeholder_in_full() -> None:
    """A full match whose placeholder printed one whole list is not scored down for the
    list's length; text that only starts or ends like a list still is."""
    frags = ["Unknown quantization method: ", ". Must be one of ", "."]
    listed = "['fp8', 'awq', 'gptq (old)', 'x]y']"
    msg = f"Unknown quantization method: mxfp4. Must be one of {listed}."
    al = align(frags, msg)
    assert al is not None and al.kind == "full" and al.values == ["mxfp4", listed]
    literal = sum(map(len, frags))
    assert score_alignment(al, len(msg), literal) > 0.9  # only "mxfp4" unexplained
    loose = f"Unknown quantization method: mxfp4. Must be one of {listed} or ['a']."
    al = align(frags, loose)
    assert al is not None and al.kind == "full"
    assert score_alignment(al, len(loose), literal) < MESSAGE_MIN
