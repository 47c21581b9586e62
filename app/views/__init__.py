"""What the pages draw: plotly figures, the offline head and BertViz views, the head detail, the Diagnose
results, exports, and the arrays derived from a cached result. Imports ``app.server`` (models for the neuron
view) and ``app.plain`` / ``app.names``, never a page."""
