"""A toy shift from a test folder, the proof that a shift is one class with one registration line (docs "Add a shift").

Rotation: every client holds upright images (a uniform sample of the training split, dealt i.i.d.); the test
population is the test split rotated by ``degrees`` (a multiple of 90, :func:`torch.rot90`): a covariate shift that
no client and no validation example shows. Validation: upright training rows no client holds (validation never
sees the target, as the domain-generalisation protocol asks). No side information. ``shift_plugins:
[tests/toy_shift/shift.py]`` loads it; a matrix ``shifts:`` entry with ``kind: toy_rotation`` then uses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from fedshift.shifts import Partition, Population, Segment, Shift, register_shift, split_rows

STREAM = 90  # this shift's stream within a seed: default_rng([seed, STREAM])


@register_shift  # the registration line
class Rotation(Shift):
    """Upright clients and validation, rotated test population (module docstring)."""

    kind = "toy_rotation"
    schema = {"required": ["dataset", "degrees", "clients", "samples_per_client", "validation_size", "test_size"],
              "properties": {"dataset": {"type": "string"}, "degrees": {"enum": [90, 180, 270]},
                             **{k: {"type": "integer", "minimum": 1}
                                for k in ("clients", "samples_per_client", "validation_size", "test_size")}}}

    def partition(self, data: Mapping[str, Mapping[str, Any]], seed: int) -> Partition:
        """I.i.d. clients, then validation from the rows no client holds, test from the test split."""
        p, d = self.params, self.params["dataset"]
        rng = np.random.default_rng([seed, STREAM])
        n_train = len(data[d]["y_train"])
        *clients, val = split_rows(rng, np.arange(n_train), [p["samples_per_client"]] * p["clients"]
                                   + [p["validation_size"]])
        (test,) = split_rows(rng, np.arange(len(data[d]["y_test"])), [p["test_size"]])
        return Partition([Segment(d, "train", c) for c in clients], [Segment(d, "train", val)],
                         [Segment(d, "test", test)], info={"degrees": p["degrees"]})

    def populations(self, data: Mapping[str, Mapping[str, Any]], partition: Partition, device: Any = "cpu"
                    ) -> dict[str, Population]:
        """The upright validation population and the test population rotated by ``degrees``."""
        pops = super().populations(data, partition, device)
        test = pops["test"]
        quarter_turns = self.params["degrees"] // 90
        side = self.image_side
        x = torch.rot90(test.x.view(-1, side, side), quarter_turns, dims=(1, 2)).reshape(len(test.y), -1)
        return {"validation": pops["validation"], "test": Population(x.contiguous(), test.y, test.group)}
