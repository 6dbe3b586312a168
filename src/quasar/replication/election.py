"""Who campaigns for a vacant leader key, and when (RocketMQ 5's controller election, with the group's leader
key in etcd instead: reference/cluster.md §4).

The campaign loop is :class:`quasar.replication.node.ReplicaNode`'s (one loop, one owner: it also steps down,
follows, serves slave reads and promotes); each campaign is ONE transaction,
:meth:`~quasar.replication.group_state.GroupLeadership.try_acquire` (the leader key must be absent and the
state unchanged, so exactly one candidate wins). Eligible: a member of the SyncStateSet; the broker configured
as master (``bootstrap``) when the group has no state yet; anyone with ``unclean`` (RocketMQ
enableElectUncleanMaster, which can lose receipted messages).

Preference without a race storm (:func:`campaign_rank`): candidates are ranked and rank ``r`` campaigns
``r`` election back-offs after the vacancy was seen; rank 0 is the in-sync member with the lowest broker id
other than the master of the state (its key vanished: it is presumed dead), the former master ranks after
every other in-sync member, unclean candidates after all of them. Several candidates still racing is safe
(the transaction decides), only slower.
"""

from __future__ import annotations

from quasar.replication.group_state import GroupState

__all__ = ["campaign_rank"]


def campaign_rank(
    state: GroupState | None, broker_id: int, *, bootstrap: bool = False, unclean: bool = False
) -> int | None:
    """When ``broker_id`` campaigns for a vacancy of a group in ``state``, in units of the election back-off
    (0: at once), or None when it is not eligible (see the module docstring for the order)."""
    if state is None:
        return 0 if bootstrap else None
    members = sorted(
        state.sync_state_set - {state.master} if state.master is not None else state.sync_state_set
    )
    if broker_id in members:
        return members.index(broker_id)
    if broker_id in state.sync_state_set:  # the former master
        return len(members)
    if unclean:
        return len(state.sync_state_set) + broker_id
    return None
