"""``AttentionMonitorCallback``: ``monitor.AttentionMonitor`` as a ``transformers.TrainerCallback``.

Measures after each optimiser step at ``state.global_step`` (1 after the first
step), on the unwrapped model (``monitor.unwrap``: DDP's ``.module``,
torch.compile's ``._orig_mod``). The tokenizer, when the
monitor has none, is the Trainer's ``processing_class``.
"""

from transformers import TrainerCallback


class AttentionMonitorCallback(TrainerCallback):
    def __init__(self, monitor):
        self.monitor = monitor

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        if model is None:
            return control
        if self.monitor.tokenizer is None and processing_class is not None:
            self.monitor.tokenizer = processing_class
        self.monitor.on_step(model, state.global_step)  # unwrapped by the monitor
        return control
