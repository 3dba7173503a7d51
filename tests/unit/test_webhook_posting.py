"""One attempt's POST (services/webhooks/posting.py) to a real receiver: it connects to the
address that was checked, whatever the name resolves to now (DNS rebinding), with the
URL's own Host; a redirect is answered, never followed; the answer kept is bounded (a
megabyte sent, 2 KiB kept)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

import pytest

from services.webhooks.posting import ANSWER_BYTES, new_client, post
from services.webhooks.targets import Target
from tests.webhook_receiver import Receiver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    hook = Receiver().up()
    yield hook
    hook.down()


def pinned(receiver: Receiver, host: str) -> Target:
    """A target named `host` (which resolves nowhere) checked to be at the receiver."""
    url = f"http://{host}:{receiver.port}/hook?x=1"
    return Target(url, "http", host, receiver.port, ipaddress.ip_address("127.0.0.1"))


def test_the_attempt_goes_to_the_checked_address_under_the_urls_host(
    receiver: Receiver,
) -> None:
    with new_client(5) as client:
        outcome = post(client, pinned(receiver, "hooks.invalid"), {"X-Test": "1"}, b"{}")
    assert outcome.delivered and outcome.status_code == 200 and outcome.answer == "ok"
    [got] = receiver.bodies()
    assert got.headers["Host"] == f"hooks.invalid:{receiver.port}"
    assert got.path == "/hook?x=1" and got.body == b"{}" and got.headers["X-Test"] == "1"


def test_a_redirect_is_recorded_and_not_followed(receiver: Receiver) -> None:
    receiver.mode, receiver.location = "redirect", "http://169.254.169.254/latest/meta-data/"
    with new_client(5) as client:
        outcome = post(client, pinned(receiver, "hooks.invalid"), {}, b"{}")
    assert not outcome.delivered and outcome.status_code == 307
    assert "169.254.169.254" in outcome.error and "not followed" in outcome.error
    assert len(receiver.bodies()) == 1


def test_no_answer_is_a_failed_attempt_with_the_error(receiver: Receiver) -> None:
    receiver.down()
    with new_client(1) as client:
        outcome = post(client, pinned(receiver, "hooks.invalid"), {}, b"{}")
    assert outcome.status_code is None and "ConnectError" in outcome.error


def test_a_big_answer_is_kept_only_in_part(receiver: Receiver) -> None:
    receiver.mode = "big"
    with new_client(5) as client:
        outcome = post(client, pinned(receiver, "hooks.invalid"), {}, b"{}")
    assert outcome.delivered and 0 < len(outcome.answer) <= ANSWER_BYTES
