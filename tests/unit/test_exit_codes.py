"""A full DATA_DIR is told apart from the trainer's own failure, and named, in one place
(services/exit_codes.py)."""

from __future__ import annotations

import errno

from services.exit_codes import NO_SPACE, describe, is_no_space, is_retryable


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
    assert describe(1) == "code 1 (permanent)"
