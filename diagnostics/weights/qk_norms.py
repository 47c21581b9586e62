"""The query and key norms a model realises on the probes: how large a score each head can actually reach.

A head's score of query i and key j is ``scale · q_i·k_j``, so by Cauchy–Schwarz
no score it can give any pair of the probes' tokens exceeds
``scale · max_i ‖q_i‖ · max_j ‖k_j‖``. The bound is reached when a query and a
key align, which on other inputs they can; unlike the spectral norm of
W_Q·W_Kᵀ on unit-RMS inputs (which assumes every direction of the residual
stream is equally likely), it uses only the queries and keys the model really
produces. Measured on the default probes (``python -m benchmarks.calibration``):
all-MiniLM-L6-v2 7.6–64.9, SmolLM2-135M 12.5–108.8, demo-bert 3.1–9.9,
demo-gpt2 14.6–36.1; their Q/K × 8 copies 230.8–10532 (2026-12-03).

``record_qk_norms`` hooks the modules that output the queries and keys
(``LayerWeights.q_source``/``k_source``) while the probes run; rotary
embeddings rotate q and k and keep their norms, so the projections' outputs
(or ``q_norm``/``k_norm``'s, where a model normalises them, on either side of
the transpose to ``[batch, heads, tokens, d]``) are the norms the scores see.
Under grouped-query attention each key/value head's norm is shared by its
query heads.
"""

from contextlib import contextmanager

import torch


class QKNorms:
    """Running maxima of ‖q‖ and ‖k‖ per head of each recorded layer (module name -> ``[H]``)."""

    def __init__(self):
        self.q, self.k = {}, {}

    def add(self, store, name, out, source, d_head, norm_input=None, fed=None):
        """Take in ``out``, ``source``'s output; a per-head norm's layout is told by its input ``norm_input`` and
        its feed's output ``fed`` where the sizes cannot (see ``Source.heads_first``): if neither can, it is left
        out rather than cut into heads that mix rows of several."""
        heads_first = source.heads_first(out, d_head, norm_input, fed)
        if heads_first is None:
            return
        norms = source.split(out.detach(), d_head, heads_first).float().norm(dim=-1).amax(0).cpu()  # (heads,)
        store[name] = norms if name not in store else torch.maximum(store[name], norms)

    def bound(self, lw):
        """``scale · max‖q_h‖ · max‖k_kv(h)‖`` per query head of ``lw`` (``[H]``, at most its soft-cap), or None if
        not recorded."""
        q, k = self.q.get(lw.name), self.k.get(lw.name)
        if q is None or k is None or len(q) != lw.n_heads or lw.n_heads % len(k):
            return None
        bound = abs(lw.scale) * q * k.repeat_interleave(lw.n_heads // len(k))  # (H,)
        return bound if lw.softcap is None else bound.clamp(max=lw.softcap)  # a capped score stays below the cap


def _output(out):
    return out[0] if isinstance(out, tuple) else out


@contextmanager
def record_qk_norms(layers):
    """Record the query and key norms of ``layers`` (``LayerWeights``) over every forward run inside the block."""
    norms, hooks, fed = QKNorms(), [], {}  # fed: id(source) -> its feed's latest output
    try:
        for lw in layers:
            for store, source in ((norms.q, lw.q_source), (norms.k, lw.k_source)):
                if source is None:
                    continue
                if source.feed is not None:
                    hooks.append(source.feed.module.register_forward_hook(
                        lambda module, args, out, key=id(source): fed.__setitem__(key, _output(out))))
                hook = (lambda module, args, out, store=store, name=lw.name, source=source, d=lw.d_head:
                        norms.add(store, name, _output(out), source, d, args[0] if args else None,
                                  fed.pop(id(source), None)))  # the norm runs right after: hold none longer
                hooks.append(source.module.register_forward_hook(hook))
        yield norms
    finally:
        for hook in hooks:
            hook.remove()
        fed.clear()
