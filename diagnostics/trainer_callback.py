"""``AttentionMonitorCallback``: ``monitor.AttentionMonitor`` as a ``transformers.TrainerCallback``.

Measures once at ``on_train_begin`` (``monitor.check``: a model or tokenizer it cannot read stops the run there,
before its first step; a new run logs it as step 0, the untrained model, as a loop calling ``on_step(model, 0)``
does; a resumed run's, or a later ``train()`` call's on the same model, only checks it), then after each optimiser
step at ``state.global_step`` (1 after the first step; a later ``train()`` call on the same model object, whose count
starts at 0 again, goes on from the steps before; a new model, as ``model_init`` makes, is a new run from step 0;
a resumed run logs its checkpoint's steps), on the unwrapped model (``monitor.unwrap``: DDP's ``.module``,
torch.compile's ``._orig_mod``). A measurement that fails during training is logged as an error and training goes
on. The tokenizer, when the monitor has none, is the Trainer's ``processing_class``.
"""

import weakref

from transformers import PreTrainedTokenizerBase, TrainerCallback

from diagnostics.monitor import unwrap


class AttentionMonitorCallback(TrainerCallback):
    def __init__(self, monitor):
        self.monitor = monitor
        self.steps_before = 0  # the monitor's steps from earlier train() calls, when this one starts again at 0

    def on_train_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
        # a later train() call on the model trained before (a notebook cell run again, a second phase) restarts
        # global_step at 0: its steps follow the ones logged, not replace them as a new step 0, 2, 4. A new model
        # (model_init, a cell that builds one) is a new run: its step 0 is logged
        trained = self.monitor.trainer_model and self.monitor.trainer_model()
        again = state.global_step == 0 and model is not None and trained is unwrap(model)
        self.steps_before = self.monitor.trainer_steps if again else 0
        if model is not None:
            self._take_tokenizer(processing_class)
            record = self.monitor.check(model, self.steps_before)
            if state.global_step == 0 and not again:
                self.monitor.publish(record)
        return control

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        step = self.steps_before + state.global_step
        if model is not None:
            self.monitor.trainer_steps, self.monitor.trainer_model = step, weakref.ref(unwrap(model))
            self._take_tokenizer(processing_class)
            self.monitor.on_step(model, step)  # unwrapped by the monitor
        return control

    def _take_tokenizer(self, processing_class):
        """The Trainer's tokenizer, or a processor's (an image or audio processor holds one, or none)."""
        if self.monitor.tokenizer is None and processing_class is not None:
            tokenizer = (processing_class if isinstance(processing_class, PreTrainedTokenizerBase)
                         else getattr(processing_class, "tokenizer", None))
            self.monitor.tokenizer = tokenizer if isinstance(tokenizer, PreTrainedTokenizerBase) else None
