"""Requests in flight for adapters that call a server (`Adapter.concurrency` > 1).

The sequential loop waits for each batch before sending the next, so with the default
`--batch_size 1` an API adapter with `concurrency=8` had one request in flight (536 requests
took 263 s). Here batches are sent from a pool of `concurrency` threads and their answers are
cached in this thread as they arrive, so `concurrency` requests are in flight whatever the
batch size (the adapter's own semaphore holds the exact bound). The audio is prepared in this
thread (the decoder's cache is not thread-safe); a batch that fails is retried one request at
a time, and a request that still fails is a failed sample, not the end of the run."""

from __future__ import annotations

import json
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

from model_adapters.base import AdapterError, Request


def process_concurrently(
    todo, group, adapter, cache, batch_size, out, bar, failures, prepare_audio, send, one_by_one
) -> None:
    """The runner's loop with `adapter.concurrency` batches in flight. The runner hands in its own
    steps (so this module does not import it): `prepare_audio(unit)`, `send(units, requests)` (one
    adapter call) and `one_by_one(units, requests)` (each request alone)."""

    def call(units, reqs):  # in a pool thread (RunState's counters take its lock)
        try:
            return send(units, reqs)
        except AdapterError:
            raise  # the model cannot run at all (a refused key, a missing model): stop
        except Exception as err:  # noqa: BLE001 - retry alone so one bad request cannot sink its batch
            if len(units) == 1:  # already alone: its retries are spent, it is a failed sample
                return [{"error": f"{type(err).__name__}: {err}"}]
            return one_by_one(units, reqs)

    # Batches queued at once: twice the limit when the adapter enforces it itself, so the
    # semaphore stays busy while some requests sleep out a rate limit; else exactly the limit.
    width = int(adapter.concurrency) * (2 if getattr(adapter, "limits_in_flight", False) else 1)
    pending: dict = {}
    i = 0
    pool = ThreadPoolExecutor(max_workers=width, thread_name_prefix="casu-req")
    finished = False
    try:
        while i < len(todo) or pending:
            while i < len(todo) and len(pending) < width:  # keep `width` batches going
                batch = [todo[i]]
                while (
                    len(batch) < batch_size
                    and i + len(batch) < len(todo)
                    and group(todo[i + len(batch)]) == group(batch[0])
                ):
                    batch.append(todo[i + len(batch)])
                i += len(batch)
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
                    except Exception as err:  # noqa: BLE001 - bad audio in one sample
                        out[u.key] = {"error": f"{type(err).__name__}: {err}"}
                        bar.update(1)
                if units:
                    pending[pool.submit(call, units, reqs)] = units
            if not pending:
                continue
            done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            for f in done:
                units = pending.pop(f)
                results = f.result()  # an AdapterError stops the run here
                for u, res in zip(units, results):
                    out[u.key] = res
                    if cache is not None and "error" not in res:
                        cache.put(u.key, json.dumps(res))
                bar.update(len(units))
                failures.add(results, adapter)
        finished = True
    finally:
        # on an error or Ctrl+C: answers already received stay cached, queued batches are
        # dropped and the requests in flight are not waited for
        pool.shutdown(wait=finished, cancel_futures=True)
