"""``AttentionMonitorCallback``: ``monitor.AttentionMonitor`` as a ``transformers.TrainerCallback``.

Measures once at ``on_train_begin`` (``monitor.check``: a model or tokenizer it cannot read stops the run there,
before its first step; a new run logs it as step 0, the untrained model, as a loop calling ``on_step(model, 0)``
does; a resumed run's step was logged by the run before), then after each optimiser step at ``state.global_step``
(1 after the first step), on the unwrapped model (``monitor.unwrap``: DDP's ``.module``, torch.compile's
``._orig_mod``). A measurement that fails during training is logged as an error and training goes on. The
tokenizer, when the monitor has none, is the Trainer's ``processing_class``.
"""

from transformers import TrainerCallback


class AttentionMonitorCallback(TrainerCallback):
    def __init__(self, monitor):
        self.monitor = monitor

    def on_train_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
        if model is not None:
            self._take_tokenizer(processing_class)
            record = self.monitor.check(model, state.global_step)
            if state.global_step == 0:
                self.monitor.publish(record)
        return control

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        if model is not None:
            self._take_tokenizer(processing_class)
            self.monitor.on_step(model, state.global_step)  # unwrapped by the monitor
        return control

    def _take_tokenizer(self, processing_class):
        if self.monitor.tokenizer is None and processing_class is not None:
            self.monitor.tokenizer = processing_class
