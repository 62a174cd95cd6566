"""Upgrading SGLang as the fix: the located check is gone, or passes, in later releases.

:func:`upgrade_fix` reads the located check in the ingested releases after the
diagnosed one (:func:`~service.engine.explain.across.check_changes` found them:
``removed``, ``changed``, ``moved`` or ``same``) and decides, release by release,
whether the user's command gets past it there:

* ``removed``: no check of that release has the condition or the message, and no check
  of a function of the same name (``ServerArgs._handle_x`` or a hook's ``handle_x``) or
  reading the same flags (under the same part of SGLang) is left there; when some are,
  they are evaluated as a ``changed`` check is (one firing means the upgrade does not
  help);
* ``changed``: the changed check (with those same-name and same-flag checks) is
  evaluated with the user's flags parsed by *that*
  release's catalog, its defaults and the triage's facts
  (:func:`~service.engine.evaluate.path_condition.evaluate_path`). False means
  ``passes`` (only ``may_pass`` when the diagnosed release's check did not evaluate
  true with those values either: they do not explain the crash); undecided means
  ``may_pass``; true means the upgrade does not help;
* ``same`` / ``moved``: the check still stands; the upgrade does not help.

The upgrade named is the oldest release X from which every later ingested release gets
past the check, so that "≥ X" holds for every release the KB knows. It is ``sure`` when
every one of them is ``removed`` and X knows every flag the user typed: a static
``passes`` is not enough (on the shipped incidents, replay refused 5 of 8 such
commands, at hook checks the evaluator read as false), so it waits for the replay of
the command on X, which makes it sure when X accepts it. What is not checked
here (the other checks of X's start-up, releases the KB lacks) is said in
``not_checked``; the replay of the user's command on X, run outside the engine, settles
the first.
"""

from __future__ import annotations

import re
from typing import Any, Literal, TypeGuard

from kb.catalogs import load_catalog
from kb.code_types import Check
from kb.store import Store
from service.engine.answer import ReleaseChange, UpgradeFix
from service.engine.cache import cached, facts_signature, release_key
from service.engine.evaluate.path_condition import base_attrs, evaluate_path
from service.engine.expr.interpreter import Value
from service.engine.flags.edit import render_command
from service.engine.flags.parse import parse_argv

__all__ = ["upgrade_fix", "upgrade_no_fix", "upgrade_phrase"]

#: a later release's checks with the command: still refused (``fires``), or not (maybe)
Verdict = Literal["fires", "passes", "may_pass"]
#: a verdict, or ``removed`` (the release has no check like it)
Status = Literal["removed", "fires", "passes", "may_pass"]
#: the statuses of a release an upgrade may target (:attr:`UpgradeFix.status`)
Passing = Literal["removed", "passes", "may_pass"]
_PASSING: tuple[Passing, ...] = ("removed", "passes", "may_pass")
_ATTR = re.compile(r"\b(?:self|server_args|args|cfg)\.([a-z_][a-z0-9_]{1,60})\b")
#: checks of a later release reading the same flags that are evaluated, at most
_MAX_SIMILAR = 5


def _later_check(store: Store, change: ReleaseChange) -> Check | None:
    """The check row a ``changed`` entry cites in its release (its last citation)."""
    if not change.citations:
        return None
    rel, path, lines = change.citations[-1].split(":", 2)
    if rel != change.release:
        return None
    try:
        start = int(lines.split("-", 1)[0])
    except ValueError:
        return None
    rows = store.checks(rel, path=path, where="start_line = ?", params=(start,))
    return rows[0] if rows else None


def _tested_attrs(check: Check) -> list[str]:
    """The arguments the check's own test reads (an assert's condition, else the innermost
    guard of a raise): ``tp_size`` for ``self.tp_size % self.dp_size == 0``."""
    guards = check.guards
    test = check.condition or (guards[-1]["condition"] if guards else "")
    return sorted(set(_ATTR.findall(test or "")))


def _same_flags_checks(store: Store, release: str, attrs: list[str], path: str) -> list[Check]:
    """Checks of ``release`` under the same part of SGLang as ``path`` (``sglang/srt``)
    whose condition or guards read every one of ``attrs``: where a check the history
    calls removed may live on, reworded (say, moved into a hook)."""
    if not attrs:
        return []
    where = " AND ".join(["path LIKE ?"] + ["(condition LIKE ? OR guards LIKE ?)" for _ in attrs])
    params = ["/".join(path.split("/")[:2]) + "/%"]
    params += [p for a in attrs for p in (f"%.{a}%", f"%.{a}%")]
    return store.checks(release, where=where, params=params)[:_MAX_SIMILAR]


def _verdict(
    store: Store,
    release: str,
    rows: list[Check],
    argv: list[str],
    server_args: dict[str, Any] | None,
    facts: dict[str, Value],
    fired_here: bool,
    fsig: str,
) -> Verdict:
    """``fires`` when a row fires with the user's values in ``release``; ``passes`` when
    every row is false and the diagnosed check fired with them; else ``may_pass``. Stops
    at the first row that fires."""
    catalog = load_catalog(store, release)
    attrs = base_attrs(catalog, parse_argv(argv, catalog), server_args)
    fired = []
    for row in rows:
        fired.append(evaluate_path(store, release, row, attrs, facts, facts_sig=fsig).fired)
        if fired[-1] is True:
            break
    if any(f is True for f in fired):
        return "fires"
    if all(f is False for f in fired) and fired_here:
        return "passes"
    return "may_pass"


def _status(
    store: Store,
    change: ReleaseChange,
    check: Check,
    argv: list[str],
    server_args: dict[str, Any] | None,
    facts: dict[str, Value],
    fired_here: bool,
    fsig: str,
) -> tuple[Status, str | None]:
    """(``removed`` / ``passes`` / ``may_pass`` / ``fires``, a check of the release that
    reads the same flags) for one later release. A changed check that evaluates false is
    only ``may_pass`` when the diagnosed release's check was not shown to fire with the
    same values (they do not explain the crash). A removed check whose flags another
    check of the release reads is judged by that check instead."""
    if change.status not in ("removed", "changed"):
        return "fires", None  # the same check, maybe on another line: it fires there too
    kin = _kin(store, change.release, check)
    if change.status == "changed":
        row = _later_check(store, change)
        if row is None:
            return "may_pass", None
        rows = list({r.id: r for r in [row, *kin]}.values())
        verdict = _verdict(store, change.release, rows, argv, server_args, facts, fired_here, fsig)
        return verdict, None
    rows = list({r.id: r for r in kin}.values())
    if not rows:
        return "removed", None
    verdict = _verdict(store, change.release, rows, argv, server_args, facts, fired_here, fsig)
    row = rows[0]
    return verdict, f"{change.release}:{row.path}:{row.start_line}"


def _passing(status: Status) -> TypeGuard[Passing]:
    """``status`` lets an upgrade to its release be offered (not ``fires``)."""
    return status in _PASSING


def _kin(store: Store, release: str, check: Check) -> list[Check]:
    """Where the rule may live on reworded in ``release``: the checks of the function of
    that name (a 0.5.19+ hook keeps the name without ``ServerArgs._``) and those reading
    the same flags; cached per release content and check (two scans of its checks)."""

    def build() -> list[Check]:
        rows = _function_checks(store, release, check)
        rows += _same_flags_checks(store, release, _tested_attrs(check), check.path)
        return list({r.id: r for r in rows}.values())

    return cached(release_key(store, release, "upgrade-kin") + (check.id, check.path), build)


def _short(function: str) -> str:
    return function.rsplit(".", 1)[-1].lstrip("_")


def _function_checks(store: Store, release: str, check: Check) -> list[Check]:
    """Checks of ``release``, under the same part of SGLang, in a function of the same
    name as ``check``'s (``ServerArgs._handle_x`` and a hook's ``handle_x`` alike)."""
    if not check.function:
        return []
    short = _short(check.function)
    rows = store.checks(
        release,
        where="function LIKE ? AND path LIKE ?",
        params=(f"%{short}", "/".join(check.path.split("/")[:2]) + "/%"),
    )
    return [r for r in rows if _short(r.function) == short][: _MAX_SIMILAR * 2]


def upgrade_fix(
    store: Store,
    version: str,
    check: Check,
    later: list[ReleaseChange],
    argv: list[str],
    server_args: dict[str, Any] | None,
    facts: dict[str, Value],
    *,
    prefix: str,
    fired_here: bool = True,
    facts_sig: str | None = None,
) -> UpgradeFix | None:
    """Upgrading as the fix of ``check`` (a ``checks`` row of ``version``; see the module
    docstring); None when the newest ingested release still refuses the command.
    ``fired_here``: the check evaluated true in ``version`` with the same values.
    ``facts_sig``: :func:`~service.engine.cache.facts_signature` of ``facts`` when known."""
    changes = [c for c in later if c.subject == "check"]
    if not changes:
        return None
    # newest first: the releases before the newest one that still refuses are never needed
    judged: dict[int, tuple[Passing, str | None]] = {}
    fsig = facts_sig or facts_signature(facts)
    start = len(changes)
    while start > 0:
        judgement, kin_at = _status(
            store, changes[start - 1], check, argv, server_args, facts, fired_here, fsig
        )
        if not _passing(judgement):
            break
        judged[start - 1] = (judgement, kin_at)
        start -= 1
    if start == len(changes):
        return None
    statuses = {i: j[0] for i, j in judged.items()}
    target, status = changes[start], statuses[start]
    catalog = load_catalog(store, target.release)
    missing = list(dict.fromkeys(parse_argv(argv, catalog).unknown))
    # static evaluation of a later release's checks is sure only of a removal: replay of
    # the shipped incidents refuted most upgrades it judged to pass (hooks read values it
    # cannot resolve); a "passes" upgrade waits for replay (service.replay.upgrade)
    sure = all(statuses[i] == "removed" for i in range(start, len(changes))) and not missing
    here = target.citations[0] if target.citations else f"{version}"
    there = target.citations[-1] if len(target.citations) > 1 else None
    similar = judged[start][1]
    if similar is not None:
        note = (
            f"{target.note}, but checks there read the same flags or sit in the same "
            f"function (first at {similar}): "
            + (
                "your flags pass them"
                if status == "passes"
                else "whether your flags pass them could not be decided statically"
            )
        )
    elif status == "removed":
        note = target.note
    elif status == "passes":
        note = f"in {target.release} the check reads `{target.condition}`, which your flags pass"
    else:
        note = (
            f"in {target.release} the check reads `{target.condition}`; whether your "
            f"flags pass it could not be decided statically"
        )
    later_ok = [c.release for c in changes[start + 1 :]]
    if later_ok:
        note += f"; so do {', '.join(later_ok)}"
    not_checked = [
        f"the other checks of {target.release}'s start-up (a replay of "
        f"{target.release}'s validation with this command settles it)",
        f"releases after {version} that the KB has not ingested",
    ]
    if missing:
        not_checked.insert(
            0, f"{target.release} does not know {', '.join(missing)}: rename or drop them"
        )
    return UpgradeFix(
        release=target.release,
        status=status,
        sure=sure,
        note=note,
        install=f'pip install "sglang=={target.release}"',
        command=render_command(argv, prefix=prefix),
        citations=[here] + [c for c in (there, similar) if c and c != here],
        flags_missing=missing,
        not_checked=not_checked,
    )


def upgrade_phrase(fix: UpgradeFix) -> str:
    """The upgrade in the summary's words: ``upgrade to SGLang ≥ 0.5.16 (check removed)``."""
    how = {
        "removed": "check removed",
        "passes": "check changed; your flags pass",
        "may_pass": "check changed",
    }[fix.status]
    if (fix.replay or {}).get("status") == "verified":
        how = "its validation accepts your command on replay"
    return f"upgrade to SGLang ≥ {fix.release} ({how})"


def upgrade_no_fix(fix: UpgradeFix, no_fix: str) -> str:
    """``no_flag_fix`` led by a sure upgrade: its phrase and why, then the reason no flag
    edit was shown to help."""
    return f"{upgrade_phrase(fix)}: {fix.note}. {no_fix}"
