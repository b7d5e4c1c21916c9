"""Who times which key, and when: the same plan computed on every rank from the same gathered documents.

- Groups: ranks whose machine fingerprint and library version (``autotune.cache``) are the same share
  entries; a key is timed by a rank of its group, for its group alone (another CPU model, another BLAS or
  thread count may choose otherwise).
- Owners: each distinct key of a group goes to one rank among those that asked for it (they share its thread
  count and device, and hold real operands for it at a miss). The biggest keys first (by FLOPs,
  ``ConvParams.flops``), each to the least-loaded node, then the least-loaded rank there (longest processing
  time first, the greedy rule within 4/3 of the best split); loads count FLOPs assigned in every round so far,
  so single-key rounds spread over the ranks too.
- Slots: a node's keys are timed one after another; in each slot every node times at most one key, so ranks
  sharing a machine's cores never time at the same moment, and different nodes time at once. After each slot
  the entries are exchanged (that all-gather is also the turn's barrier, so no collective waits for more than
  one key's tuning).
"""
from __future__ import annotations

from collections import namedtuple

#: one rank: its node (``exchange.node_id``) and its group (machine id and library version).
Member = namedtuple("Member", "rank node group")
#: ``owners``: (group, key) -> rank; ``slots``: per slot, rank -> key it times then.
Plan = namedtuple("Plan", "owners slots")


def make_plan(members: list, wanted: list, load: list) -> Plan:
    """The plan of one round. ``wanted[r]``: the keys rank r asks for, in its order; ``load[r]``: the FLOPs
    rank r was given in earlier rounds, updated here."""
    askers, order = {}, []
    for rank, keys in enumerate(wanted):
        for key in keys:
            job = (members[rank].group, key)
            if job not in askers:
                askers[job] = []
                order.append(job)
            if rank not in askers[job]:
                askers[job].append(rank)
    order.sort(key=lambda job: -job[1].params.flops)            # stable: ties keep the ranks' order
    owners, queues = {}, {}
    for job in order:
        node_load = {}
        for m in members:
            node_load[m.node] = node_load.get(m.node, 0) + load[m.rank]
        owner = min(askers[job], key=lambda r: (node_load[members[r].node], load[r], r))
        owners[job] = owner
        load[owner] += job[1].params.flops
        queues.setdefault(members[owner].node, []).append((owner, job[1]))
    depth = max((len(q) for q in queues.values()), default=0)
    slots = [{q[s][0]: q[s][1] for q in queues.values() if s < len(q)} for s in range(depth)]
    return Plan(owners, slots)
