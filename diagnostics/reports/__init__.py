"""``Report`` (the result of ``diagnose``) and its JSON, Markdown and HTML renderings."""
