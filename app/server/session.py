"""Whether the browser session that started a piece of work is still there.

Streamlit (1.67) removes a session from the runtime's active sessions when its
browser disconnects (``Runtime.is_active_session``) and asks its script to stop
(``ScriptRequests.request_stop``), but a script busy inside a forward pass only
notices at its next Streamlit call. ``stop_when_gone`` gives core's
``should_stop`` hooks (``core.cancel``) a way to ask between layers and probes.
"""

from __future__ import annotations

from streamlit.runtime import Runtime
from streamlit.runtime.scriptrunner_utils.exceptions import StopException
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



def request_again(request: BaseException) -> None:
    """Hand Streamlit's rerun or stop ``request``, raised from a page element drawn during work other sessions may
    wait for, back to it, pending: the next element drawn once the work is over raises it again, folded by Streamlit
    itself with any click that came after it (in order; a fragment's rerun too)."""
    ctx = get_script_run_ctx()
    if ctx is None:  # raised in a script, so there is one; never drop a request
        raise request
    if isinstance(request, StopException):
        ctx.script_requests.request_stop()
    else:
        ctx.script_requests.request_rerun(request.rerun_data)
