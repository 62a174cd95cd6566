""" "Not a launch-flag problem": crashes raised outside SGLang's checks.

The SGLang frame of each log is a real line of 0.5.11 read from the store; the packages
and messages outside SGLang are made up (no check of any release raises them).
"""

from __future__ import annotations

import pytest

from kb.store import Store
from service.engine.triage import Engine

SITE = "/usr/local/lib/python3.11/site-packages"


@pytest.fixture(scope="module")
def sglang_frame(store: Store) -> str:
    """A frame of 0.5.11's fp8 module at a line that imports something."""
    path = "sglang/srt/layers/quantization/fp8.py"
    lines = store.file_lines("0.5.11", path, 1, 200)
    n = next(i for i, line in enumerate(lines, start=1) if line.startswith(("import ", "from ")))
    return f'  File "{SITE}/{path}", line {n}, in <module>\n    {lines[n - 1].strip()}\n'


def _log(*parts: str) -> str:
    return "Traceback (most recent call last):\n" + "".join(parts)


def test_an_error_raised_inside_another_package(kb, store: Store, sglang_frame: str) -> None:
    log = _log(
        sglang_frame,
        f'  File "{SITE}/flashinfer/jit/core.py", line 123, in build\n'
        "    raise RuntimeError(msg)\n",
        "RuntimeError: Ninja build failed: nvcc fatal : Unsupported gpu architecture "
        "'compute_120a'\n",
    )
    res = Engine(kb).triage(log, release="0.5.11")
    nf = res.not_flag_problem
    assert nf is not None and nf.kind == "raised_elsewhere" and nf.package == "flashinfer"
    assert res.location is None and not res.fixes  # no nearest-sounding check instead
    assert res.summary == "Not a launch-flag problem: RuntimeError from flashinfer."
    assert res.no_flag_fix is not None and res.no_flag_fix.startswith("not a launch-flag problem")
    assert set(nf.checked_releases) >= {"0.5.11", "0.5.23"} and nf.not_checked
    assert nf.evidence == [f'File "{SITE}/flashinfer/jit/core.py", line 123, in build']
    # the call into the package, cited at a line the KB holds
    rel, path, line = nf.citations[0].split(":")
    assert (rel, path) == ("0.5.11", "sglang/srt/layers/quantization/fp8.py")
    assert store.file_lines(rel, path, int(line), int(line))
    assert res.citations == nf.citations and "**Not a launch-flag problem:**" in res.explanation


def test_an_import_from_a_mismatched_package_is_dependency_skew(kb, sglang_frame: str) -> None:
    log = _log(
        sglang_frame,
        "ImportError: cannot import name 'fp8_scaled_mm_zz' from "
        f"'sgl_kernel' ({SITE}/sgl_kernel/__init__.py)\n",
    )
    res = Engine(kb).triage(log, release="0.5.11")
    nf = res.not_flag_problem
    assert nf is not None and nf.kind == "dependency_skew" and nf.package == "sgl_kernel"
    assert "does not match this SGLang release" in nf.reason


@pytest.mark.parametrize(
    "tail",
    [
        # the message names a flag of the release: a flag may fix it
        (
            '  File "{site}/transformers/models/auto/configuration_auto.py", line 1000, in f\n'
            "    raise ValueError(\n"
            "ValueError: The repository contains custom code. Please pass the argument "
            "`trust_remote_code=True` to allow custom code to be run.\n"
        ),
        # out of memory: --mem-fraction-static and friends may fix it
        (
            '  File "{site}/torch/cuda/memory.py", line 10, in empty\n    raise x\n'
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
        ),
        # SGLang's own module failed to import: a broken install, not another package
        "ImportError: cannot import name 'zz' from 'sglang.srt.utils' ({site}/sglang/srt/utils.py)\n",
    ],
)
def test_it_stays_silent_when_a_flag_or_sglang_may_be_at_fault(
    kb,
    sglang_frame: str,
    tail: str,
) -> None:
    res = Engine(kb).triage(_log(sglang_frame, tail.format(site=SITE)), release="0.5.11")
    assert res.not_flag_problem is None
    assert not (res.no_flag_fix or "").startswith("not a launch-flag problem")


def test_an_error_raised_in_sglang_is_never_called_elsewhere(kb, store: Store) -> None:
    """The innermost frame in SGLang: whatever happens, not "not a flag problem"."""
    path = "sglang/srt/server_args.py"
    line = store.file_lines("0.5.11", path, 1, 50)
    n = next(i for i, x in enumerate(line, start=1) if x.startswith(("import ", "from ")))
    log = _log(
        f'  File "{SITE}/{path}", line {n}, in <module>\n    {line[n - 1].strip()}\n',
        "RuntimeError: something nobody raises zzqq\n",
    )
    assert Engine(kb).triage(log, release="0.5.11").not_flag_problem is None
