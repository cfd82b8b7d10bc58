"""Building a model on the meta device, as methods of `Run`: `meta_device()` records the
build (the random state it starts from, what it does to every tensor) so that `setup` can
give each process its share with exactly the weights an ordinary build would have had, and
`meta_init_difference` says when it cannot."""

from __future__ import annotations

import contextlib
from typing import Optional

import torch
from torch import nn


class RunMetaBuild:
    """Mixed into Run: sets its `_meta_rng` and `_meta_built`, which `setup` reads."""

    @contextlib.contextmanager
    def meta_device(self):
        """Build a model inside this block and it holds no memory until `run.setup` gives each
        process its share of it: for models larger than one process. The random state the
        build starts drawing from is kept, so that setup initialises the model exactly as
        building it here on a real device would have.

            with run.meta_device():
                model = MyModel()                     # shapes only
            model, optimizer = run.setup(model, torch.optim.AdamW(model.parameters()))
        """
        def first_parameter(module, name, param):
            # The state before the first module draws its initial weights: after any seeding
            # the building code does itself (a factory that calls torch.manual_seed first).
            if self._meta_rng is None:
                self._meta_rng = torch.get_rng_state()

        from ..parallel.init_trace import recording

        self._meta_rng = None
        hook = torch.nn.modules.module.register_module_parameter_registration_hook(first_parameter)
        try:
            # Recorded (meta kernels only), so that setup can tell whether replaying the
            # modules' initialisation reproduces this build (parallel/meta_check.py).
            with torch.device("meta"), recording() as self._meta_built:
                yield
        finally:
            hook.remove()

    def meta_init_difference(self, model: nn.Module) -> Optional[str]:
        """For a model built inside `meta_device()`: None when `setup` will give it exactly the
        weights an ordinary build would have; else why not, in words (a buffer computed in a
        constructor, an initialisation of the constructor's own, weights tied after both drew)."""
        from ..parallel.meta_check import meta_build_difference

        return meta_build_difference(model, self._meta_built)

