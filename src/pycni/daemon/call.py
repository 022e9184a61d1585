"""One connection and the call it carries: the state the daemon's main loop and the worker
running the call share."""

from __future__ import annotations

import socket
import threading
from enum import Enum

from pycni.daemon.protocol import Reply, Request
from pycni.daemon.request_io import ReplyWriter, RequestReader
from pycni.daemon.stats import CallRecord
from pycni.record import field, record


class Phase(Enum):
    RECEIVING = "receiving"
    WAITING = "waiting"  # in its container's lane behind an earlier call
    SUBMITTED = "submitted"  # handed to the pool (queued for a worker or running)
    DONE = "done"  # the worker returned (a reply may still be on its way)


@record(eq=False)
class Call:
    """One connection and the call it carries. Main thread, except the fields under ``lock``."""

    sock: socket.socket | None
    accepted_ns: int
    deadline: float
    record: CallRecord
    reader: RequestReader = field(default_factory=RequestReader)
    phase: Phase = Phase.RECEIVING
    request: Request | None = None
    key: str | None = None
    holds_lane: bool = False
    admitted: bool = False
    ready_ns: int = 0
    writer: ReplyWriter | None = None
    send_deadline: float = 0.0
    undo_if_undelivered: bool = False
    timer_gen: int = 0
    monitored: bool = True
    hello_done: bool = False
    # shared with the worker thread
    lock: threading.Lock = field(default_factory=threading.Lock)
    cancel: threading.Event = field(default_factory=threading.Event)
    started: bool = False
    skipped: bool = False
    returned: bool = False
    abandoned: bool = False
    gone: bool = False
    timed_out: bool = False
    answered: bool = False  # an error reply was already given (deadline)
    undone: bool = False  # the worker already rolled back an ADD nobody received
    delivered: bool = False  # the worker wrote the whole reply itself (worker.py)
    replied_ns: int = 0  # when the reply's last byte was sent (the record's total ends there)
    result: Reply | None = None
    rest: ReplyWriter | None = None  # a reply the worker began and the main thread finishes


def is_successful_add(req: Request, reply: Reply) -> bool:
    return reply.exit_code == 0 and req.env.get("CNI_COMMAND") == "ADD"
