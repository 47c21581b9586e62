"""Whether the browser session that started a piece of work is still there.

Streamlit (1.67) removes a session from the runtime's active sessions when its
browser disconnects (``Runtime.is_active_session``) and asks its script to stop
(``ScriptRequests.request_stop``), but a script busy inside a forward pass only
notices at its next Streamlit call. ``stop_when_gone`` gives core's
``should_stop`` hooks (``core.cancel``) a way to ask between layers and probes.
"""

from __future__ import annotations

from streamlit.runtime import Runtime
from streamlit.runtime.scriptrunner_utils.exceptions import RerunException, StopException
from streamlit.runtime.scriptrunner_utils.script_requests import ScriptRequestType
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx


def stop_when_gone():
    """A ``should_stop`` callable for the current session; None outside a served session (AppTest, scripts)."""
    ctx = get_script_run_ctx()
    if ctx is None or not Runtime.exists():
        return None
    runtime, session_id, requests = Runtime.instance(), ctx.session_id, ctx.script_requests

    def gone() -> bool:
        stopping = getattr(requests, "_state", None) == ScriptRequestType.STOP  # no public accessor in 1.67
        return stopping or not runtime.is_active_session(session_id)
    return gone


def folded(held: list) -> BaseException:
    """One request for Streamlit's rerun and stop requests ``held`` (oldest first) while shared work ran, and for any
    that came after them: a stop if there is one, else a rerun whose data folds them all in order, as Streamlit folds
    requests that wait together (every click's button press kept, each widget's latest value). Raising only the last
    lost a button pressed before another click."""
    ctx = get_script_run_ctx()
    if ctx is None or any(isinstance(r, StopException) for r in held):
        return next((r for r in held if isinstance(r, StopException)), held[-1])
    requests = ctx.script_requests
    waiting = requests.on_scriptrunner_yield()  # a click since the last one held: it goes last
    if waiting is not None and waiting.type == ScriptRequestType.STOP:
        return StopException()
    later = [waiting.rerun_data] if waiting is not None else []
    for data in [r.rerun_data for r in held] + later:
        requests.request_rerun(data)
    merged = requests.on_scriptrunner_yield()
    return RerunException(merged.rerun_data) if merged is not None else held[-1]
