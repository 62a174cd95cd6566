"""The parallel layout a command line sets, for the block-shape tests."""

from __future__ import annotations

#: spellings of the tensor, expert and MoE data parallel sizes
_NAMES = {
    "--tp": "tp",
    "--tp-size": "tp",
    "--tensor-parallel-size": "tp",
    "--ep": "ep",
    "--ep-size": "ep",
    "--expert-parallel-size": "ep",
    "--moe-dp-size": "dp",
    "--moe-data-parallel-size": "dp",
}


def layout(argv: list[str]) -> tuple[int, int, int]:
    """(tp, ep, moe_dp) a command line sets (defaults 1)."""
    values = {"tp": 1, "ep": 1, "dp": 1}
    for i, arg in enumerate(argv[:-1]):
        if arg in _NAMES:
            values[_NAMES[arg]] = int(argv[i + 1])
    return values["tp"], values["ep"], values["dp"]
