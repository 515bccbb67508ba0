"""Fair sharing of the server: heavy work (training, model passes over long texts, generation, knockout
rankings, head detectors) runs one request at a time, so a light page of another session never competes
with more than one heavy request for the CPU and the interpreter; the others wait their turn, in order of
arrival, and say whose work they wait for.

On a public demo (limit_waiting) a visitor has at most one heavy request waiting (besides one running), and a
request whose expected wait (the estimated work still to do of every request ahead of it) is more than the
Budget's max_wait_seconds is refused with a "too busy, try again in about N s" message instead of queueing. A
running request's work still to do is its estimate minus the time it has run; past its estimate, the rest of its
time budget (training is stopped when that is spent), or as long again as it has run: never 0 while it runs.

Work is heavy when its estimated cost is (HEAVY_SECONDS and above): light analysis of a model or trace already
cached does not take the turn. A visitor is a browser (its Streamlit cookie); a client that sends no cookie is
its network address (visitor_key), so that reconnecting without cookies does not make a new visitor.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from ..serve.hosting import FULL_SIZE

DEFAULT_SECONDS = 3.0  # estimated CPU seconds of a heavy request whose cost is not known (a generation, a knockout)
HEAVY_SECONDS = 1.0  # work estimated at this many CPU seconds or more takes the heavy turn; less runs at once
MIN_LEFT = 1.0  # a running request past its estimate and its time budget still counts this much work to do
LOOPBACK = ("127.", "::1", "::ffff:127.")  # the project's own proxy (deploy/nginx, scripts/replicas.sh) runs here
POLL = 0.5  # seconds between two updates of a waiting request's message (each is a point where a rerun stops it)


@dataclass(eq=False)
class Ticket:
    """One heavy request: whose (session, visitor), its estimated seconds, the time it is stopped at (None: no time
    budget), and when it started running."""

    session: str
    visitor: str
    seconds: float
    limit: float | None = None
    started: float | None = None
    arrived: float = field(default_factory=time.monotonic)

    def left(self, now: float) -> float:
        """Estimated seconds of work still to do: the estimate minus the time run; past it, what is left of the time
        budget, or (no budget) as long again as it has run; never below MIN_LEFT while it runs."""
        if self.started is None:
            return self.seconds
        ran = now - self.started
        if ran < self.seconds:
            return self.seconds - ran
        return max(MIN_LEFT, ran if self.limit is None else self.limit - ran)


_turn = threading.Condition()  # guards _running and _queue; notified when the turn is released
_running: list[Ticket] = []  # the one request holding the turn (empty: free)
_queue: list[Ticket] = []  # requests waiting, first come first served
_max_wait: list[float | None] = [None]  # limit_waiting's bound (None: every request waits its turn)
_held = threading.local()  # this thread already holds the turn (heavy work inside heavy work)


class TooBusy(RuntimeError):
    """A heavy request refused rather than queued (its message says why and what to do)."""


class TimeSpent(RuntimeError):
    """Heavy work stopped because it ran past its time limit (check_time; its message says so)."""


def limit_waiting(max_wait_seconds: float | None) -> None:
    """From now on refuse a heavy request that would wait behind more than max_wait_seconds of others' estimated
    work, or that a visitor asks for while another of theirs already waits, and stop heavy work without a time limit
    of its own after that many seconds (check_time) (None: no limit, a local install)."""
    _max_wait[0] = max_wait_seconds


def check_time() -> None:
    """TimeSpent when this thread's heavy work has run past its time limit (a block's own, or limit_waiting's bound):
    loops of heavy work (patching passes, knockout passes, a long trace's layers; out_of_time for generation and the
    head detectors) call it between passes, so that no heavy request holds the turn much longer than the bound others
    wait by."""
    ticket = getattr(_held, "ticket", None)
    if ticket is None or ticket.limit is None or ticket.started is None:
        return
    ran = time.monotonic() - ticket.started
    if ran > ticket.limit:
        raise TimeSpent(f"stopped at this demo's time budget: this work ran {ran:.0f} s, more than the "
                        f"{ticket.limit:.0f} s one heavy request may take here. Ask for less (fewer passes, a shorter "
                        f"text), or {FULL_SIZE}")


def out_of_time() -> bool:
    """check_time as a question, for library loops that stop themselves and keep what they did (their should_stop
    callback: a generation between tokens, the head detectors between probe sequences): True once this thread's
    heavy work has run past its time limit."""
    try:
        check_time()
    except TimeSpent:
        return True
    return False


def visitor_key(cookies: Mapping[str, str], address: str | None, headers: Mapping[str, str]) -> str | None:
    """Who a request comes from: its browser's Streamlit cookie (every tab of a browser) or, from a client that
    sends none, its network address: the client's own, or, when that is the project's own proxy on this machine
    (a loopback address), the last address in the X-Forwarded-For that proxy appends. None: nothing to tell by."""
    cookie = cookies.get("_streamlit_xsrf") or cookies.get("mha_viz_route")
    if isinstance(cookie, str) and cookie:
        return "cookie:" + hashlib.sha256(cookie.encode()).hexdigest()[:16]
    if address and address.startswith(LOOPBACK):
        forwarded = (headers.get("X-Forwarded-For") or "").split(",")[-1].strip()
        address = forwarded or address
    return f"address:{address}" if address else None


def _whose() -> tuple[str, str]:
    """(session id, visitor id) of the running script (visitor_key; without a request behind it, as in AppTest,
    the session)."""
    ctx = get_script_run_ctx()
    session = ctx.session_id if ctx is not None else f"thread-{threading.get_ident()}"
    visitor = None
    if ctx is not None:
        try:
            visitor = visitor_key(st.context.cookies, st.context.ip_address, st.context.headers)
        except Exception:  # noqa: BLE001 - no request behind this run (AppTest): the session stands for the visitor
            visitor = None
    return session, visitor or session


def refusal(ticket: Ticket, now: float) -> str | None:
    """Why ticket is refused rather than queued (under _turn), or None: it may wait."""
    limit = _max_wait[0]
    if limit is None:
        return None
    if any(t.visitor == ticket.visitor and t.session != ticket.session for t in _queue):
        return ("You already have a heavy page waiting its turn (in another tab); this one was not queued, so that "
                "others get their turn too. Try again once that page has been drawn.")
    ahead = sum(t.left(now) for t in _running + _queue)
    if ahead > limit:
        return (f"This demo is busy: the heavy work queued ahead of this page would take about {ahead:.0f} s, more "
                f"than the {limit:.0f} s a page may wait (MHA_VIZ_MAX_WAIT_SECONDS). Try again in about "
                f"{ahead:.0f} s (or change a setting to retry then).")
    return None


def waiting_message(what: str, ticket: Ticket, now: float) -> str:
    """What a waiting request shows (under _turn): whose work is ahead of it (this visitor's own earlier
    requests, other visitors' requests), how much, and how long it has waited."""
    ahead = _running + _queue[: _queue.index(ticket)]
    own = sum(t.visitor == ticket.visitor for t in ahead)
    others = len(ahead) - own
    parts = []
    if own:
        parts.append("your own earlier request" if own == 1 else f"{own} of your own earlier requests")
    if others:
        parts.append("another visitor's heavy request" if others == 1 else f"{others} other visitors' heavy requests")
    seconds = sum(t.left(now) for t in ahead)
    return (f"{what}: waiting for {' and '.join(parts)} to finish (about {seconds:.0f} s of work ahead, waited "
            f"{now - ticket.arrived:.0f} s; one heavy request runs at a time so that every page stays quick)…")


def _take_turn(what: str, ticket: Ticket) -> None:
    """Wait (with a message that says for whom) until ticket is first in line and the turn is free; take it.

    TooBusy when the request is refused rather than queued. The message is redrawn every POLL seconds: each
    redraw is a point where Streamlit stops this run when the visitor has changed something meanwhile (the
    caller then gives the ticket up: _release).
    """
    with _turn:
        if not _running and not _queue:
            ticket.started = time.monotonic()
            _running.append(ticket)
            return
        reason = refusal(ticket, time.monotonic())
        if reason is not None:
            raise TooBusy(reason)
        _queue.append(ticket)
    slot = st.empty()
    while True:
        with _turn:
            if not _running and _queue[0] is ticket:
                _queue.pop(0)
                ticket.started = time.monotonic()
                _running.append(ticket)
                break
            message = waiting_message(what, ticket, time.monotonic())
        slot.info(message, icon=":material/hourglass_top:")
        with _turn:
            _turn.wait(POLL)
    slot.empty()


def _release(ticket: Ticket) -> None:
    """ticket out of the line or the turn, wherever it is; the next in line is woken."""
    with _turn:
        for place in (_queue, _running):
            if ticket in place:
                place.remove(ticket)
        _turn.notify_all()


@contextmanager
def heavy(what: str, seconds: float = DEFAULT_SECONDS, limit: float | None = None) -> Iterator[None]:
    """Run the block as heavy work: at once if no other heavy work runs or waits, else after the requests ahead
    of it (with a message saying whose they are). seconds: the block's estimated CPU seconds (for the bound of
    limit_waiting and the messages); limit: the seconds after which the block stops its work itself (a training's
    time budget; None: limit_waiting's bound, which check_time enforces). Below HEAVY_SECONDS the block is light and
    runs at once.

    Nested heavy blocks of one thread share its turn. The turn (or the place in line) is given up however the
    block ends, even when Streamlit stops the run (the user changed something) while it waits or works. A request
    refused under limit_waiting shows why and stops this run (st.stop), drawing nothing more.
    """
    if getattr(_held, "turn", False) or seconds < HEAVY_SECONDS:
        yield
        return
    ticket = Ticket(*_whose(), seconds=seconds, limit=limit if limit is not None else _max_wait[0])
    try:
        _take_turn(what, ticket)
    except TooBusy as err:
        st.warning(str(err), icon=":material/hourglass_disabled:")
        st.stop()
        raise  # outside a Streamlit run st.stop does nothing: the caller gets TooBusy
    except BaseException:
        _release(ticket)
        raise
    _held.turn, _held.ticket = True, ticket
    try:
        yield
    finally:
        _held.turn, _held.ticket = False, None
        _release(ticket)


def leave_a_core_free() -> None:
    """On a public demo, torch computes on one thread: heavy work then takes one core, not all of them, and
    the other stays free for every other session's light pages (small matrices gain little from more)."""
    import torch

    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)
