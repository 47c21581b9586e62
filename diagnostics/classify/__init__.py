"""Numbers → labels: the head pattern classifier, its synthetic and hand-labelled evaluation sets."""
