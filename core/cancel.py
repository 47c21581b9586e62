"""Stopping work nobody waits for: a ``should_stop`` callable, checked between layers and between steps.

A long extraction or diagnosis cannot be interrupted from outside a Python
thread, so the caller hands in ``should_stop`` (e.g. the app's "is this browser
session still connected?") and the work asks it at safe points:
``stop_between_layers`` registers a forward pre-hook on every block of the
model's layer stacks (each ``nn.ModuleList``) that raises ``Cancelled`` before
the block runs, and ``stoppable`` wraps a ``progress(fraction, message)``
callback so each progress step (one probe of a diagnosis) asks too. Hooks are
removed in ``finally``, as TransformerLens does with its temporary hooks.
``progress_span`` hands one step of a longer job (one model of a comparison, one
checkpoint of a timeline) its share of the caller's progress bar. ``waited_for`` takes a lock in rounds, so a
wait for another run can say so and stop.
"""

from __future__ import annotations

from contextlib import contextmanager

from torch import nn

from .errors import Cancelled

CANCELLED = "stopped: the session that asked for this work has ended"


def check(should_stop) -> None:
    """Raise ``Cancelled`` when ``should_stop`` is given and returns true."""
    if should_stop is not None and should_stop():
        raise Cancelled(CANCELLED)


def stoppable(progress, should_stop):
    """``progress`` (or a no-op) that first raises ``Cancelled`` when ``should_stop()`` is true."""
    def tell(fraction, message):
        check(should_stop)
        if progress is not None:
            progress(fraction, message)
    return tell


@contextmanager
def waited_for(lock, waiting, every_s: float):
    """``lock`` for the ``with``, taken in rounds of ``every_s`` seconds with ``waiting()`` called after each round
    it was not free: the wait can say why, and end (``waiting`` may raise ``Cancelled``), as a plain acquire
    cannot."""
    while not lock.acquire(timeout=every_s):
        waiting()
    try:
        yield
    finally:
        lock.release()


def progress_span(progress, start: float, stop: float, prefix: str = ""):
    """A ``progress(fraction, message)`` for one step of a longer job: its 0..1 maps to ``start..stop``
    of ``progress``, and its messages get ``prefix`` when one is given (``"model A: probe 2/7"``)."""
    def tell(fraction, message):
        progress(start + (stop - start) * fraction, f"{prefix}: {message}" if prefix else message)
    return tell


def layer_blocks(model: nn.Module) -> list[nn.Module]:
    """Every module held in an ``nn.ModuleList`` of ``model`` (its layers), or the model itself if none."""
    blocks = [block for stack in model.modules() if isinstance(stack, nn.ModuleList) for block in stack]
    return blocks or [model]


def layer_stacks(model: nn.Module) -> list[nn.ModuleList]:
    """The model's stacks of layers: each ``nn.ModuleList`` held in no other (a VLM's vision tower and its language
    model; a hybrid's convolution and attention layers are one stack, ALBERT's one shared group another)."""
    stacks, nested = [], set()
    for module in model.modules():  # parents before children
        if isinstance(module, nn.ModuleList) and id(module) not in nested:
            stacks.append(module)
            nested.update(id(m) for m in module.modules() if m is not module)
    return stacks


@contextmanager
def layer_progress(model: nn.Module, progress, n_layers: int | None = None):
    """While inside, ``progress(fraction, "layer 3/30")`` as each block of the first layer stack the forward runs
    starts (a VLM's language model on text, not its longer vision tower), of at least ``n_layers`` (ALBERT runs
    its one group 12 times). Stacks of ``n_layers`` blocks are preferred, where there are some (not a list of
    projections that runs before the layers)."""
    stacks = layer_stacks(model) if progress is not None else []
    stacks = [s for s in stacks if len(s) == n_layers] or stacks
    running, started = [None], [0]  # the stack that ran first, and how many of its blocks started

    def tell(stack, module, args):
        if running[0] is None:
            running[0] = stack
        if stack is running[0]:
            total = max(len(stack), n_layers or 0)
            started[0] = min(started[0] + 1, total)
            progress((started[0] - 1) / total, f"layer {started[0]}/{total}")

    handles = [block.register_forward_pre_hook(lambda module, args, stack=stack: tell(stack, module, args))
               for stack in stacks for block in stack]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def stop_between_layers(model: nn.Module, should_stop):
    """While inside, each layer of ``model`` first checks ``should_stop`` and raises ``Cancelled`` if true."""
    if should_stop is None:
        yield
        return
    handles = [block.register_forward_pre_hook(lambda module, args: check(should_stop))
               for block in layer_blocks(model)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
