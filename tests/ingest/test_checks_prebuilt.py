"""Raises of exceptions and messages built earlier in the function (``ingest.prebuilt``).

The snippets are shaped like SGLang's own (the release and place each mirrors is named);
the last test takes a real one from the session KB and locates it from its message alone.
"""

from __future__ import annotations

import textwrap

from ingest import ts
from ingest.checks import extract_checks


def _raises(src: str) -> list:
    tree = ts.parse(textwrap.dedent(src).encode())
    return [c for c in extract_checks(tree.root_node) if c.kind == "raise"]


def test_prebuilt_exception_gives_type_message_and_both_lines() -> None:
    # 0.5.23 sglang/srt/layers/layer_boundary/factories.py
    (ck,) = _raises("""
        def plan(before, origins):
            if before.output_transform is not None:
                error = NotImplementedError(
                    "a pipeline rank that ends on an attention transforming the "
                    "output whose sum it leaves"
                )
                _note_origin(error, origins[0])
                raise error
        """)
    assert ck.exc_type == "NotImplementedError" and not ck.bare
    assert ck.message is not None and ck.message.startswith('"a pipeline rank')
    assert (ck.start_line, ck.end_line) == (9, 9)  # the raise: where the frame points
    assert (ck.test_start, ck.test_end) == (4, 7)  # the construction
    assert [g.condition for g in ck.guards] == ["before.output_transform is not None"]


def test_prebuilt_message_name_resolves_to_its_string() -> None:
    # 0.5.5 sglang/srt/managers/scheduler_runtime_checker_mixin.py (_check_req_pool)
    (ck,) = _raises("""
        def _check_req_pool(self):
            if len(self.pool.free_slots) != total:
                msg = (
                    "req_to_token_pool memory leak detected!"
                    f"available_size={len(self.pool.free_slots)}, "
                    f"total_size={self.pool.size}\\n"
                )
                raise ValueError(msg)
        """)
    assert ck.exc_type == "ValueError" and not ck.bare
    assert "memory leak detected!" in ck.message and "{len(self.pool.free_slots)}" in ck.message
    assert (ck.start_line, ck.test_start, ck.test_end) == (9, 4, 8)


def test_unconditional_augmentations_are_appended_conditional_ones_are_not() -> None:
    # 0.5.23 sglang/srt/model_executor/pool_configurator.py (__post_init__)
    cond, always = _raises("""
        def a(self):
            msg = "Not enough memory. Please try to increase --mem-fraction-static."
            if self.mem_fraction_static is not None:
                msg += f" Current value: mem_fraction_static={self.mem_fraction_static}"
            raise RuntimeError(msg)

        def b(e):
            error_message = f"Failed create mf store, invalid ascend_url."
            error_message += f" With exception {e}"
            raise RuntimeError(error_message)
        """)
    assert cond.message == '"Not enough memory. Please try to increase --mem-fraction-static."'
    assert (cond.test_start, cond.test_end) == (3, 3)
    assert always.message == (
        'f"Failed create mf store, invalid ascend_url." + f" With exception {e}"'
    )
    assert (always.test_start, always.test_end) == (9, 10)


def test_exception_built_from_a_prebuilt_message() -> None:
    (ck,) = _raises("""
        def f(x):
            msg = "bad value %s" % (x,)
            err = ValueError(msg)
            raise err
        """)
    assert ck.exc_type == "ValueError" and ck.message == '"bad value %s" % (x,)'
    assert (ck.test_start, ck.test_end) == (4, 4)


def test_reraises_and_unresolvable_names_read_as_written() -> None:
    # 0.5.5 sglang/srt/utils/common.py (direct_register_custom_op) and marlin_utils.py
    reraise, unpacked, other_call, nested, rebound = _raises("""
        def reg(op):
            try:
                op()
            except RuntimeError as error:
                raise error

        def verify(quant_type):
            cond, err_msg = _check_marlin_supported(quant_type)
            if not cond:
                raise ValueError(err_msg)

        def g():
            err = make_error()
            raise err

        def h():
            msg = "outer"
            def inner():
                msg = "inner only"
                return msg
            raise ValueError(msg)

        def k(items):
            msg = "first"
            for msg in items:
                pass
            raise ValueError(msg)
        """)
    assert (reraise.exc_type, reraise.bare, reraise.test_start) == ("error", True, None)
    assert (unpacked.message, unpacked.test_start) == ("err_msg", None)
    assert (other_call.exc_type, other_call.test_start) == ("err", None)
    assert nested.message == '"outer"'  # a nested function's binding is not the raise's
    assert (rebound.message, rebound.test_start) == ("msg", None)


def test_a_later_binding_in_source_order_wins() -> None:
    (ck,) = _raises("""
        def f(x):
            if x:
                msg = "one"
            else:
                msg = "two {}".format(x)
            raise ValueError(msg)
        """)
    assert ck.message == '"two {}".format(x)' and ck.test_start == 6


def test_a_real_prebuilt_raise_is_located_from_its_message_alone(store) -> None:
    """0.5.5's ``_check_req_pool`` builds its message in ``msg`` and raises
    ``ValueError(msg)``: the message alone now finds that raise."""
    from service.engine.locate.message import MESSAGE_MIN, match_message

    rows = [
        c
        for c in store.checks(
            "0.5.5", path="sglang/srt/managers/scheduler_runtime_checker_mixin.py"
        )
        if c.function.endswith("_check_req_pool") and c.kind == "raise"
    ]
    assert len(rows) == 1
    row = rows[0]
    assert row.exc_type == "ValueError" and "memory leak detected" in row.message
    assert row.test_start < row.start_line
    logged = "req_to_token_pool memory leak detected!available_size=3, total_size=4"
    hits = match_message(store, "0.5.5", logged, exc_type="ValueError", limit=3)
    assert hits and hits[0].check_id == row.id and hits[0].score >= MESSAGE_MIN
