"""Messages to the nodes over Flower's grid: push a batch, collect the replies in time.

The handshake (:mod:`fedsparse.flower.handshake`), the rounds' ``train`` messages and the
evaluations (:mod:`fedsparse.flower.grid_round`) all go through :func:`exchange`.
"""

from __future__ import annotations

import time

from flwr.app import Message
from flwr.serverapp import Grid

__all__ = ["exchange", "message_ttl"]

#: Seconds a message outlives the wait for its reply: slack for the clocks of the
#: ServerApp and the SuperLink, which stamp and expire it.
TTL_MARGIN = 60.0


def message_ttl(timeout: float) -> float:
    """The time-to-live of a message whose reply is awaited ``timeout`` seconds.

    Once the wait is over nobody reads its reply, so the SuperLink may drop it: a node
    back from an outage is then not handed the messages of rounds already over (Flower's
    default keeps a message 12 hours), each of which it would train on for nothing.
    """
    return float(timeout) + TTL_MARGIN


def exchange(grid: Grid, messages: list[Message], timeout: float, poll: float = 0.2
             ) -> dict[int, Message]:
    """Push ``messages``; pull replies until all arrived or ``timeout`` seconds passed.

    Like ``grid.send_and_receive``, but polling every ``poll`` seconds: the deployment
    grid polls every 3 s, which is most of a short round on a fast network.

    Returns
    -------
    dict
        ``{i: reply to messages[i]}`` for the replies that arrived in time (error replies
        included), matched by the id of the message they answer: a reply to a message
        not sent here, or a second reply to one, is ignored.
    """
    if not messages:
        return {}
    index = {mid: i for i, mid in enumerate(grid.push_messages(messages)) if mid}
    pending = set(index)
    replies: dict[int, Message] = {}
    deadline = time.monotonic() + timeout
    while pending:
        for reply in grid.pull_messages(list(pending)):
            mid = reply.metadata.reply_to_message_id
            if mid in pending:
                pending.discard(mid)
                replies[index[mid]] = reply
        left = deadline - time.monotonic()
        if not pending or left <= 0:
            break
        time.sleep(min(poll, left))  # never past the deadline
    return replies
