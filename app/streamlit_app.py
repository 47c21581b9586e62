"""AttnScope's Streamlit app: ``streamlit run app/streamlit_app.py``.

Five pages (Inspect, Diagnose, Compare, Timeline, Guide); each page script only gathers input,
calls ``core`` / ``diagnostics`` and draws.
"""

import sys
from pathlib import Path

import streamlit as st

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # streamlit puts only app/ on the path; core/ and diagnostics/ sit beside it
    sys.path.insert(0, str(ROOT))

# Import both packages whole, here, before any page: a rerun that starts while the last run is still importing
# them would otherwise import their modules in another order in another thread, and Python's import locks then
# deadlock ("_DeadlockError ... diagnostics.classify.patterns", seen once in the browser test on a busy machine).
# ``import core`` alone imports nothing (``core.lazy``).
import core  # noqa: E402
import diagnostics  # noqa: E402
from app.errors import panics_shown  # noqa: E402
from app.server.log_lines import log_to_stderr  # noqa: E402
from core.lazy import import_whole  # noqa: E402

PAGES = Path(__file__).parent / "app_pages"
FAVICON = Path(__file__).parent / "static" / "favicon.png"  # a file: a ":material/…:" icon is fetched from Google

st.set_page_config(page_title="AttnScope", page_icon=str(FAVICON), layout="wide")
with st.spinner("Starting AttnScope: loading PyTorch and transformers (once per server start)…"):
    import_whole(core, diagnostics)  # ~4 s the first time, the page blank white until then; instant after
log_to_stderr()
UNREAD_SETTINGS = ("AttnScope's settings (.streamlit/config.toml) were not read: start it from its folder, "
                   "`streamlit run app/streamlit_app.py`. Without them Streamlit's browser page sends usage "
                   "statistics to Streamlit and uploads stop at 200 MB; BertViz's scripts come inside each view.")
if not st.get_option("server.enableStaticServing") or st.get_option("browser.gatherUsageStats"):
    st.sidebar.warning(UNREAD_SETTINGS)  # started from another folder: .streamlit/ is read from where you start
navigation = st.navigation([
    st.Page(PAGES / "inspect.py", title="Inspect", icon=":material/search:", default=True),
    st.Page(PAGES / "diagnose.py", title="Diagnose", icon=":material/stethoscope:"),
    st.Page(PAGES / "compare.py", title="Compare", icon=":material/compare:"),
    st.Page(PAGES / "timeline.py", title="Timeline", icon=":material/timeline:"),
    st.Page(PAGES / "guide.py", title="Guide", icon=":material/menu_book:"),
])
with panics_shown():  # a page's `except Exception` does not catch a native library's panic
    navigation.run()
