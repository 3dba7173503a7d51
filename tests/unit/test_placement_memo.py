"""The leader's memory of its last idle pass counts a pass only once it has committed
(services/cluster/placement_digest.py)."""

from services.cluster.placement_digest import PlacementMemo


def test_only_a_committed_pass_is_remembered() -> None:
    memo = PlacementMemo()
    memo.begin()
    memo.pending = ("first",)
    memo.committed()
    assert memo.idle == ("first",)
    memo.begin()
    memo.pending = ("rolled back",)  # its transaction failed: no committed()
    memo.begin()  # the next pass
    assert memo.pending is None and memo.idle == ("first",)
    memo.committed()  # a pass that placed or was not idle leaves nothing to compare with
    assert memo.idle is None


def test_a_new_term_forgets() -> None:
    memo = PlacementMemo(idle=("seen",))
    memo.forget()
    assert memo.idle is None and memo.pending is None
