"""Where each validation check runs in a release's validation order (for ground truth).

:func:`validation_positions` places the checks of the validation files
(:data:`kb.store.VALIDATION_PREFIXES`) by the engine's validation order and the call
sites that lead to them: a check that runs earlier sorts first, so
:meth:`evals.groundtruth.Prober.earlier_firing` knows which checks would fire before.
"""

from __future__ import annotations

from kb.store import VALIDATION_PREFIXES, Store
from service.engine import call_site_guards, dispatcher_position, validation_order

__all__ = ["validation_positions"]


def validation_positions(store: Store, release: str) -> dict[int, tuple[float, ...]]:
    """check id -> position in the validation order, for checks whose position is known.

    A check in a step the dispatcher calls sorts as ``(rank, line)``; one in a helper
    called (in the same file) from a step at line L as ``(rank, L, line)``, and so on; one
    in the dispatcher's own body as ``(rank of the next step - 0.5, line)``.
    Checks in functions that cannot be placed are left out.
    """
    order = validation_order(store, release)
    prefixes: dict[tuple[str, str], tuple[float, ...] | None] = {}

    def prefix(qual: str, path: str, depth: int = 0) -> tuple[float, ...] | None:
        key = (qual, path)
        if key in prefixes:
            return prefixes[key]
        prefixes[key] = None  # cycle guard
        name = qual.rsplit(".", 1)[-1]
        rank = order.get(name)
        result: tuple[float, ...] | None = None
        if rank is not None and rank == int(rank):
            result = (rank,)
        elif depth < 4:
            # call sites in the same file (the caller's prefix is looked up in ``path``)
            sites = [s for s in call_site_guards(store, release, qual, path) if s.path == path]
            if sites:
                up = prefix(sites[0].caller, path, depth + 1)
                result = (*up, float(sites[0].line)) if up is not None else None
        prefixes[key] = result
        return result

    out: dict[int, tuple[float, ...]] = {}
    for check in store.checks(release):
        if not check.path.startswith(VALIDATION_PREFIXES):
            continue
        p = prefix(check.function, check.path)
        if p is None:  # a check in the dispatcher's own body (0.4.x's __post_init__)
            at = dispatcher_position(store, release, check.function, check.path, check.start_line)
            p = (at,) if at is not None else None
        if p is not None:
            out[check.id] = (*p, float(check.start_line))
    return out
