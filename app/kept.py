"""The inputs a user typed or picked outlive the runs that do not draw them.

Streamlit drops a widget's value when a run does not draw the widget: after the Model radio was switched away and
back, or after a visit to another page, a picker showed its default again while the page still showed the result
of the old choice. Every widget a user fills in or picks with is drawn with ``persist_state=KEEP``: Streamlit keeps
its value for the session, across pages and while it is hidden. (Writing each value back to its widget at the start
of every run, the older way, pushed it to the browser as a forced value: a text typed in the sidebar form and not
yet run was put back to the last Run's whenever anything else reran the page; and choices made in a fragment, a
head picked on a result, were not kept.) A form sends its values only when it is submitted: what is typed in
Inspect's sidebar form and not yet run outlives reruns of the page, but a visit to another page keeps the last
Run's. The zoom sliders are not kept: their range is the result's.
"""

KEEP = "session"
