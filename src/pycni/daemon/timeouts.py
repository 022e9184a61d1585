"""What a call's timer does when it fires (main thread): the request, call and reply
deadlines of docs/daemon.md.

A request not received in time is answered with a decoding error; a call still waiting in
its lane is dropped; a running call is cancelled (its exec'd delegates killed, the plugin
rolls back), given ``cancel_grace`` to return, and then abandoned: its worker is replaced
until it returns. A reply not taken in time closes the connection (and undoes an ADD).
"""

from __future__ import annotations

import logging

from pycni.daemon import policy, protocol
from pycni.daemon.call import Call, Phase
from pycni.daemon.call_table import CallTable

log = logging.getLogger("pycni.daemon")


def on_timer(table: CallTable, call: Call, now: float, cancel_grace: float) -> None:
    if call.writer is not None:  # the reply was not taken in time
        table.reply_failed(call, "reply not taken before the send deadline")
        return
    if call.phase is Phase.RECEIVING:
        call.record.kind = "bad-request"
        err = protocol.malformed(
            f"incomplete request after {table.recv_timeout:g} s "
            f"({call.reader.received} bytes received)"
        )
        call.record.note = str(err)
        table.reply(call, protocol.error_reply(err))
        return
    if call.phase is Phase.WAITING:
        assert call.key is not None
        table.lanes.drop(call.key, call)
        call.admitted = False
        call.phase = Phase.DONE
        _time_out(table, call, started=False)
        if call.sock is None:
            table.finish(call)
        return
    if call.phase is not Phase.SUBMITTED or call.answered:
        return
    with call.lock:
        started = call.started
        returned = call.returned
        if not started:
            call.cancel.set()  # the worker will skip it
        elif not call.timed_out:
            call.timed_out = True
            call.cancel.set()  # exec'd delegates are killed; the plugin rolls back
        elif not returned:
            call.abandoned = True
    if not started:
        _time_out(table, call, started=False)
    elif call.abandoned:
        _time_out(table, call, started=True)
        if not table.pool.borrow():
            log.error("too many calls overran their deadline and still hold workers")
    elif not returned:
        table.timers.set(call, now + cancel_grace)


def _time_out(table: CallTable, call: Call, *, started: bool) -> None:
    table.stats.bump("timed_out")
    call.record.add_note(f"deadline of {table.call_timeout:g}s passed")
    log.warning(
        "%s %s %s: deadline of %gs passed %s",
        call.record.container_id[:12] or "-",
        call.record.plugin_type,
        call.record.command or "-",
        table.call_timeout,
        "while running; cancelled" if started else "before it could start",
    )
    call.answered = True
    if call.sock is not None:
        table.reply(call, policy.deadline_error(table.call_timeout, started, None))
