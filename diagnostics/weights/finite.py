"""The ``non_finite_weights`` finding: parameters that hold NaN or ±inf.

A NaN in a head's value or output projection, or in an MLP, leaves every attention map finite, so
``non_finite_attention`` never sees it, while the model's output is NaN. So every floating-point parameter
is checked; the heads named are those whose own W_Q, W_K, W_V or W_O rows hold the values.
"""

import torch

from core.extraction.head_weights import LayerWeights
from core.extraction.offload import weights_in_memory
from diagnostics.findings import head_names, make_finding

MAX_NAMED = 5  # tensors named in the message; all of them are in the details


def non_finite_findings(model, layers: list[LayerWeights]) -> list:
    """One error finding per part with broken heads (one on the first part when only other tensors are broken)."""
    broken = _non_finite_parameters(model)
    if not broken:
        return []
    shown = ", ".join(broken[:MAX_NAMED]) + (f" and {len(broken) - MAX_NAMED} more" if len(broken) > MAX_NAMED else "")
    parts = list(dict.fromkeys(lw.part for lw in layers)) or ["self"]
    heads = {part: [[lw.layer, h] for lw in layers if lw.part == part for h in range(lw.n_heads)
                    if not _head_finite(lw, h)] for part in parts}
    return [make_finding("non_finite_weights", heads[part], sum(lw.n_heads for lw in layers if lw.part == part) or 1,
                         part, details={"tensors": broken}, n_tensors=len(broken), tensors=shown,
                         heads_list=f": {head_names(heads[part], part)}" if heads[part] else "")
            for part in ([part for part in parts if heads[part]] or parts[:1])]


def _non_finite_parameters(model) -> list[str]:
    """The names of the floating-point parameters holding NaN or ±inf, read one module at a time (accelerate's
    offloaded ones are brought in for the look)."""
    broken, seen = [], set()
    for prefix, module in model.named_modules():
        with weights_in_memory(module, recurse=False):
            for name, p in module.named_parameters(recurse=False):
                if id(p) not in seen and p.is_floating_point() and not torch.isfinite(p).all():
                    broken.append(f"{prefix}.{name}".lstrip("."))
                seen.add(id(p))  # a tied weight (GPT-2's lm_head is wte) is named once, by its first module
    return broken


def _head_finite(lw: LayerWeights, head: int) -> bool:
    """Whether ``head``'s own Q, K, V rows and O columns are all finite."""
    rows = [lw.heads(w)[head] for w in (lw.w_q, lw.w_k, lw.w_v)] + [lw.out_heads()[head]]  # (d, d_in) ×3, (d_out, d)
    return all(bool(torch.isfinite(w).all()) for w in rows)
