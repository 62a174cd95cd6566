"""Values the ground-truth search (:class:`evals.groundtruth.Prober`) tries for a flag.

Besides a flag's choices, it tries the constants the path condition compares the flag
with (:func:`compared_constants`, and the integers next to them), a few typical numbers
(:data:`INT_VALUES`, :data:`FLOAT_VALUES`) and, for a path-like flag, a plausible path
(:func:`path_value`). :data:`FROZEN_ATTRS` are never edited, and :data:`PARALLEL_SIZES`
stay within the GPUs of the hardware profile.
"""

from __future__ import annotations

import ast

__all__ = [
    "FLOAT_VALUES",
    "FROZEN_ATTRS",
    "INT_VALUES",
    "PARALLEL_SIZES",
    "compared_constants",
    "path_value",
]

#: attributes a generated command never edits (the model is the context, not a flag to fix)
FROZEN_ATTRS = frozenset({"model_path", "tokenizer_path", "device"})
#: integers tried for an int flag (after the constants its conditions compare it with)
INT_VALUES = (1, 2, 4, 8)
#: parallel sizes, kept within the GPUs of the hardware profile
PARALLEL_SIZES = frozenset(
    {
        "tp_size",
        "dp_size",
        "pp_size",
        "ep_size",
        "moe_dp_size",
        "attn_cp_size",
        "dcp_size",
        "cp_size",
        "moe_ep_size",
    }
)
#: floats tried for a float flag
FLOAT_VALUES = (0.5,)


def compared_constants(attr: str, conditions: list[str]) -> list[object]:
    """Constants ``attr`` is compared with (``==``, ``in``, ``<``...) in ``conditions``."""
    out: list[object] = []

    def reads(node: ast.AST) -> bool:
        return any(isinstance(n, ast.Attribute) and n.attr == attr for n in ast.walk(node))

    for text in conditions:
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            if not any(reads(s) for s in sides):
                continue
            for side in sides:
                elts = side.elts if isinstance(side, ast.Tuple | ast.List | ast.Set) else [side]
                for e in elts:
                    if isinstance(e, ast.Constant) and e.value is not None:
                        out.append(e.value)
                        if isinstance(e.value, int) and not isinstance(e.value, bool):
                            out.extend([e.value + 1, e.value - 1])
    return out


def path_value(attr: str, model: str) -> str:
    """A plausible path for the path-like flag ``attr`` under ``model`` (a draft model, a
    directory or a JSON file named after the model)."""
    name = model.rstrip("/").rsplit("/", 1)[-1]
    if "draft" in attr:
        return f"/models/{name}-EAGLE3"
    if attr.endswith("_dir"):
        return f"/data/{attr.removesuffix('_dir')}"
    return f"/data/{name}-{attr.removesuffix('_path')}.json"
