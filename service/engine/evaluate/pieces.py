"""The pieces of a check's path condition: what each one is to the check and which of
its atoms push it towards firing.

:class:`PiecePart` is one evaluated piece (a call-site guard, an enclosing ``if``, an
early exit the path passes, an assert's test); :func:`atom_signs` tells, per atom of a
condition, whether it counts with its value, its negation or neither. Built by
:func:`service.engine.evaluate.path_condition.evaluate_path`, read by the explanation
and the fix search.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass

from service.engine.expr.interpreter import UNKNOWN, Result

#: Piece kinds (:attr:`PiecePart.kind`): what a piece is to the check.
#: ``call_site``: a guard of the call of the checking function; ``if``: an enclosing
#: ``if``; ``exit_return``: an earlier ``if ...: return`` the path passes (the check's
#: function applies); ``exit_raise``: an earlier sibling check that did not raise (not a
#: reason this check fired: the crash itself shows it passed); ``test``: an assert's test.
PIECE_KINDS = ("call_site", "if", "exit_return", "exit_raise", "test")


@dataclass
class PiecePart:
    role: str  # "call_site" | "guard" | "test"
    condition: str
    polarity: bool  # True: this piece must hold for the check to fire
    line: int | None
    result: Result
    holds: object  # True / False / UNKNOWN
    kind: str = ""  # one of PIECE_KINDS ("" when not known)
    own_test: bool = False  # the check's own test: an assert's test, a raise's innermost `if`

    @property
    def explains(self) -> bool:
        """Can this piece be a reason the check fired? Not a passed sibling check."""
        return self.kind != "exit_raise"

    def atoms_failing(self) -> list[bool]:
        """Per atom of ``result.atoms``: does its value push this piece towards firing?

        Only atoms of a piece that holds and explains (:attr:`explains`) can; an atom
        under a ``not`` pushes with its negation, and the test of a ternary with neither.
        """
        atoms = self.result.atoms
        if self.holds is not True or not self.explains:
            return [False] * len(atoms)
        signs = atom_signs(self.condition)
        if len(signs) != len(atoms):
            signs = (True,) * len(atoms)
        out: list[bool] = []
        for atom, sign in zip(atoms, signs, strict=True):
            if sign is None or not isinstance(atom.value, bool):
                out.append(False)
                continue
            out.append((atom.value if sign else not atom.value) == self.polarity)
        return out


@functools.lru_cache(maxsize=16384)
def atom_signs(condition: str) -> tuple[bool | None, ...]:
    """The sign of each atom of ``condition`` in the order the evaluator lists them:
    True under an even number of ``not``, False under an odd one, None in a ternary's test."""
    try:
        node = ast.parse(condition.strip(), mode="eval").body
    except SyntaxError:
        return ()
    out: list[bool | None] = []

    def walk(n: ast.expr, sign: bool | None) -> None:
        if isinstance(n, ast.BoolOp):
            for v in n.values:
                walk(v, sign)
        elif isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not):
            walk(n.operand, None if sign is None else not sign)
        elif isinstance(n, ast.IfExp):
            walk(n.body, sign)
            walk(n.test, None)
            walk(n.orelse, sign)
        else:
            out.append(sign)

    walk(node, True)
    return tuple(out)


def piece_holds(truth: object, polarity: bool) -> object:
    """Whether a piece holds (True / False / UNKNOWN): its condition's ``truth``, negated
    when the piece must not hold for the check to fire (``polarity`` False)."""
    if truth is UNKNOWN:
        return UNKNOWN
    return truth if polarity else (not truth)


def all_hold(values: list[object]) -> object:
    """Three-valued conjunction: False if any is False, else UNKNOWN if any is, else True."""
    if any(v is False for v in values):
        return False
    if any(v is UNKNOWN for v in values):
        return UNKNOWN
    return True
