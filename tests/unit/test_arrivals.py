"""The arrival tracker times each sender's beat by the control plane's clock (a fake one
here): when its value was first seen to change, whatever time the sender wrote."""

from __future__ import annotations

from services.cluster.arrivals import Arrivals, Heard


class Reads:
    """Reads of one hash, each at a given time of the control plane's (fake) clock."""

    def __init__(self) -> None:
        self.now = 0.0
        self.arrivals: Arrivals[str] = Arrivals(lambda: self.now)

    def at(self, now: float, values: dict[str, str]) -> dict[str, Heard]:
        self.now = now
        return self.arrivals.observe(values)


def test_a_beat_is_heard_when_its_value_is_first_seen_not_at_the_time_it_names() -> None:
    reads = Reads()
    reads.at(1000.0, {})
    # The senders' clocks say 5 minutes behind and 5 minutes ahead: neither counts.
    assert reads.at(1010.0, {"a": "ts=710", "b": "ts=1310"}) == {
        "a": Heard(at=1010.0, after=1000.0),
        "b": Heard(at=1010.0, after=1000.0),
    }


def test_an_unchanged_value_keeps_its_first_arrival() -> None:
    reads = Reads()
    reads.at(1000.0, {"a": "1"})
    reads.at(1001.0, {"a": "2"})
    assert reads.at(1030.0, {"a": "2"})["a"] == Heard(at=1001.0, after=1000.0)
    assert reads.at(1031.0, {"a": "3"})["a"] == Heard(at=1031.0, after=1030.0)


def test_a_value_going_back_to_an_earlier_one_is_a_new_beat() -> None:
    # A sender whose clock was stepped back writes a smaller time: still a beat.
    reads = Reads()
    for now, value in ((1000.0, "500"), (1002.0, "400")):
        reads.at(now, {"a": value})
    assert reads.at(1004.0, {"a": "500"})["a"].at == 1004.0


def test_the_first_read_counts_as_heard_then_but_is_no_news() -> None:
    # A new leader: the beats it finds may be fresh or an hour old. It grants each one
    # timeout from now (nothing is lost at once) and revives nothing.
    reads = Reads()
    first = reads.at(1000.0, {"live": "ts=1", "dead": "ts=0"})
    assert first == {"live": Heard(at=1000.0, after=None), "dead": Heard(at=1000.0, after=None)}
    assert not first["dead"].news
    later = reads.at(1020.0, {"live": "ts=2", "dead": "ts=0"})
    assert later["live"] == Heard(at=1020.0, after=1000.0) and later["live"].news
    # The dead sender's beat stays as first heard: it ages, and is lost in time.
    assert later["dead"] == Heard(at=1000.0, after=None)


def test_a_sender_that_appears_after_the_first_read_is_news() -> None:
    reads = Reads()
    reads.at(1000.0, {})
    assert reads.at(1003.0, {"new": "x"})["new"].news


def test_a_sender_gone_from_the_hash_is_forgotten() -> None:
    reads = Reads()
    reads.at(1000.0, {"a": "1"})
    reads.at(1001.0, {})  # the hash was wiped (a Redis flush) or the node deregistered
    # Written again with the very same value: heard now, as news.
    assert reads.at(1002.0, {"a": "1"})["a"] == Heard(at=1002.0, after=1001.0)
