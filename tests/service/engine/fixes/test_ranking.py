"""Ranking candidate fixes (``service.engine.fixes.ranking.rank``)."""

from __future__ import annotations

from service.engine.fixes.model import Edit, Verdict
from service.engine.fixes.ranking import rank


def _clean(**sets: object) -> Verdict:
    return Verdict(Edit(set=dict(sets)), fixes_check=True)


def test_a_flag_the_message_names_breaks_a_tie() -> None:
    """Two clean one-flag fixes alike in every other respect: without a word on which flag
    the user set, the order is the edits' own; the message naming one flag puts its fix
    first (``--linear-attn-prefill-backend flashinfer ...``: fixed on that flag whether or
    not ``--linear-attn-backend`` was set too)."""
    other, subject = (
        _clean(linear_attn_backend="cutedsl"),
        _clean(linear_attn_prefill_backend="cutedsl"),
    )
    assert rank([other, subject]) == [other, subject]
    assert rank([other, subject], named=frozenset({"linear_attn_prefill_backend"})) == [
        subject,
        other,
    ]


def test_the_named_flag_does_not_outrank_a_clean_fix() -> None:
    """A fix that trips another check stays behind a clean one, named flag or not."""
    clean = _clean(tp_size=2)
    tripping = Verdict(
        Edit(set={"attn_cp_size": 1}), fixes_check=True, trips=[{"id": "x", "line": 1}]
    )
    assert rank([tripping, clean], named=frozenset({"attn_cp_size"})) == [clean, tripping]
