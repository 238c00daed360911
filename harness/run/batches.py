"""Forming batches and their requests: the one loop step that the sequential runner and the
concurrent one (requests in flight) share."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

import numpy as np

from model_adapters.base import Request

if TYPE_CHECKING:
    from harness.run.runner import Unit


def next_batch(
    todo: list[Unit], start: int, group: Callable[[Unit], Hashable], batch_size: int
) -> list[Unit]:
    """Up to `batch_size` neighbouring units from `todo[start]` on, all of one group (one scoring
    mode and one set of generation settings)."""
    batch = [todo[start]]
    while (
        len(batch) < batch_size
        and start + len(batch) < len(todo)
        and group(todo[start + len(batch)]) == group(batch[0])
    ):
        batch.append(todo[start + len(batch)])
    return batch


def requests_for(
    batch: list[Unit], prepare_audio: Callable[[Unit], np.ndarray | None], out: dict[str, Any]
) -> tuple[list[Unit], list[Request]]:
    """The batch's requests and the units they are for. A unit whose audio cannot be prepared is
    a failed sample (its error in `out`), and the rest of the batch goes on."""
    units, reqs = [], []
    for u in batch:
        try:
            reqs.append(
                Request(
                    prompt=u.prompt,
                    audio=prepare_audio(u),
                    options=u.options,
                    system=u.system,
                    id=u.sample.id,
                    task=u.task.task,
                    kind="answer" if u.task.output_type == "multiple_choice" else "describe",
                )
            )
            units.append(u)
        except Exception as err:  # noqa: BLE001 - bad audio in one sample: recorded, the rest go on
            out[u.key] = {"error": f"{type(err).__name__}: {err}"}
    return units, reqs
