"""Models spread by accelerate with offload (``load_model(..., device_map="auto")`` past the devices' memory).

Their offloaded parameters sit on the ``meta`` device between forwards; accelerate's hooks bring each module's in
for its forward and drop them after. Whatever reads weights outside a forward brings them in the same way, one
module at a time, so the whole model is never held at once.
"""

from contextlib import ExitStack, contextmanager

import torch


def offloaded(module: torch.nn.Module) -> bool:
    """Whether accelerate offloads ``module``'s own parameters (its hook loads them for each forward)."""
    from accelerate.utils import has_offloaded_params

    return has_offloaded_params(module)


@contextmanager
def weights_in_memory(module: torch.nn.Module, recurse: bool = True):
    """``module`` with the offloaded parameters of it (and, with ``recurse``, of its submodules) on the CPU,
    given back to accelerate's offload on exit. A module nothing offloads is left as it is."""
    from accelerate.utils import align_module_device

    with ExitStack() as stack:
        for sub in module.modules() if recurse else [module]:
            if offloaded(sub):
                stack.enter_context(align_module_device(sub, torch.device("cpu")))
        yield module


def parameter_count(model: torch.nn.Module) -> int:
    """The model's parameters, a tied weight counted once: an offloaded model's forward unties them (BART's shared
    embedding became three tensors, and its count grew by two vocabularies' worth of weights)."""
    params = dict(model.named_parameters(remove_duplicate=False))
    tied = getattr(model, "all_tied_weights_keys", None) or {}  # target -> source names (transformers)
    untied_by_offload = {target for target, source in tied.items()  # not a copy untied on purpose, which holds data
                         if source in params and target in params and params[target].is_meta}
    seen, total = set(), 0
    for name, p in params.items():
        if name not in untied_by_offload and id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total


def execution_device(model: torch.nn.Module) -> torch.device | None:
    """The device accelerate runs the model's forwards on (its hooks'), or None where it placed no hook."""
    for module in model.modules():
        device = getattr(getattr(module, "_hf_hook", None), "execution_device", None)
        if device is not None:  # an int is a CUDA index (torch.device(0) asks for the current accelerator)
            return torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    return None


def first_weight(model: torch.nn.Module) -> torch.Tensor | None:
    """The model's first parameter that holds data (an offloaded one is on ``meta``), else None."""
    return next((p for p in model.parameters() if not p.is_meta), None)
