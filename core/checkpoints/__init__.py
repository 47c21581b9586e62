"""Everything that turns bytes on disk into a model: names, folders, archives, state dicts.

``loading.load_model`` is the entry point; it routes archives and bare weights to
``checkpoint.load_checkpoint``. Imports point one way: loading → checkpoint →
build / tokenizer / infer_arch / state_dict / archive → registry, quiet.
"""
