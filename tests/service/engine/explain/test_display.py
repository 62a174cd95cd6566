"""The texts every front end shows for a fix's command (service/engine/explain/display.py)."""

from __future__ import annotations

from service.engine.answer import FixOut
from service.engine.explain.display import command_markdown, command_note


def _fix(**kw: object) -> FixOut:
    base = dict(
        rank=1,
        set={"--moe-a2a-backend": "deepep"},
        remove=["--enable-two-batch-overlap"],
        argv=["--moe-a2a-backend", "deepep"],
        command="python -m sglang.launch_server --moe-a2a-backend deepep",
        origin="test",
        fixes_check="true",
        verdict="fixes the check",
    )
    return FixOut(**{**base, **kw})  # type: ignore[arg-type]


def test_a_whole_command_is_fenced_to_copy() -> None:
    fix = _fix()
    assert command_note(fix) is None
    assert command_markdown(fix, "  ") == (
        "  ```\n  python -m sglang.launch_server --moe-a2a-backend deepep\n  ```"
    )


def test_without_the_whole_command_the_change_is_fenced_and_the_note_follows() -> None:
    fix = _fix(command_complete=False)
    note = "The log shows no full launch command: make the change above in yours."
    assert command_note(fix) == note  # the log showed no flag the fix does not set
    assert command_markdown(fix) == (
        "```\n- --enable-two-batch-overlap\n+ --moe-a2a-backend deepep\n```\n\n" + note
    )
    shown = _fix(
        command_complete=False,
        argv=["--tp", "2", "--moe-a2a-backend", "deepep"],
        command="python -m sglang.launch_server --tp 2 --moe-a2a-backend deepep",
    )
    assert command_note(shown) == (
        f"{note[:-1]} (the flags the log showed, changed: {shown.command})"
    )
