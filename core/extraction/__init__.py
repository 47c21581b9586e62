"""Model → attention maps: Hugging Face, AttnScope and ``nn.MultiheadAttention`` adapters, and streaming.

``extract.extract_attention`` returns the whole ``[layers, heads, q, k]`` maps;
``streaming.stream_attention`` hands them out layer by layer, a few query rows at a time.
"""
