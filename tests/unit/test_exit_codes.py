"""A full DATA_DIR is told apart from the trainer's own failure, and named, in one place
(services/exit_codes.py); a failure's kind (retryable, permanent, a program's error) is
what its reason says."""

from __future__ import annotations

import errno

import pytest

from services.exit_codes import (
    NO_SPACE,
    FailureKind,
    classify,
    describe,
    is_no_space,
    is_retryable,
)

SYNTAX_ERROR_TAIL = """  File "/work/train.py", line 3
    def broken(:
               ^
SyntaxError: invalid syntax
"""


class OpError(Exception):
    """What TensorFlow raises from a C++ op: no errno, only the text."""


def test_enospc_is_found_wherever_it_is_in_the_chain() -> None:
    assert is_no_space(OSError(errno.ENOSPC, "No space left on device"))
    assert is_no_space(
        OpError("/data/ckpt-1_temp/part-0.tempstate1; No space left on device [Op:SaveV2]")
    )
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as exc:
            raise RuntimeError("saving the checkpoint failed") from exc
    except RuntimeError as wrapped:
        assert is_no_space(wrapped)


def test_other_failures_are_not_a_full_disk() -> None:
    assert not is_no_space(OSError(errno.EIO, "Input/output error"))
    assert not is_no_space(ValueError("bad shape"))
    looped = ValueError("a")
    looped.__context__ = looped  # a cycle never loops forever
    assert not is_no_space(looped)


def test_a_full_disk_is_retryable_and_named_in_the_reason() -> None:
    assert is_retryable(NO_SPACE)
    assert describe(NO_SPACE) == "code 28 (no space left on DATA_DIR, retryable)"
    assert describe(1) == "code 1 (program error)"


@pytest.mark.parametrize(
    ("code", "tail", "kind"),
    [
        (None, "", FailureKind.RETRYABLE),
        (137, "", FailureKind.RETRYABLE),
        (143, "SyntaxError: invalid syntax", FailureKind.RETRYABLE),
        (138, "", FailureKind.RETRYABLE),
        (NO_SPACE, "", FailureKind.RETRYABLE),
        (2, "", FailureKind.PERMANENT),
        (78, "", FailureKind.PERMANENT),
        (126, "", FailureKind.PERMANENT),
        (127, "", FailureKind.PERMANENT),
        (139, "", FailureKind.PERMANENT),
        (1, SYNTAX_ERROR_TAIL, FailureKind.PERMANENT),
        (1, "    x\nIndentationError: unexpected indent\n\n", FailureKind.PERMANENT),
        (1, "ModuleNotFoundError: No module named 'torch'", FailureKind.PERMANENT),
        (1, "ImportError: cannot import name 'f' from 'm'", FailureKind.PERMANENT),
        (1, "Traceback\nConnectionResetError: [Errno 104]", FailureKind.PROGRAM_ERROR),
        (1, "", FailureKind.PROGRAM_ERROR),
        # Only the interpreter's last line counts: a SyntaxError caught and logged earlier,
        # or one named inside another error's message, is not the program's end.
        (1, "SyntaxError: in a config\nValueError: bad", FailureKind.PROGRAM_ERROR),
        (1, "RuntimeError: SyntaxError: x", FailureKind.PROGRAM_ERROR),
        (3, "SyntaxError: invalid syntax", FailureKind.PROGRAM_ERROR),
    ],
)
def test_a_failure_is_retryable_permanent_or_a_program_error(
    code: int | None, tail: str, kind: FailureKind
) -> None:
    assert classify(code, tail) is kind


def test_the_reason_names_the_python_error_and_says_permanent() -> None:
    assert describe(1, SYNTAX_ERROR_TAIL) == "code 1 (SyntaxError, permanent)"
    assert describe(1, "ValueError: x") == "code 1 (program error)"
    assert describe(137) == "code 137 (SIGKILL, retryable)"
    assert describe(127) == "code 127 (permanent)"
