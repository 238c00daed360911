"""Requests in flight for adapters that call a server (`Adapter.concurrency` > 1).

The sequential loop waits for each batch before sending the next, so with `--batch_size 1` an
API adapter would have one request in flight. Here batches are sent from a pool of
`concurrency` threads and their answers are cached in this thread as they arrive, so
`concurrency` requests are in flight whatever the batch size (the adapter's own semaphore holds
the exact bound). The audio is prepared in this thread (the decoder's cache is not
thread-safe); a batch that fails is retried one request at a time, and a request that still
fails is a failed sample, not the end of the run."""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

from harness.run.batches import ModelOutput, next_batch, requests_for
from model_adapters.base import STOPS_RUN


def process_concurrently(
    todo, group, adapter, cache, batch_size, out, bar, failures, prepare_audio, send, one_by_one
) -> None:
    """The runner's loop with `adapter.concurrency` batches in flight. The runner hands in its own
    steps (so this module does not import it): `prepare_audio(unit)`, `send(units, requests)` (one
    adapter call) and `one_by_one(units, requests)` (each request alone)."""

    def call(units, reqs):  # in a pool thread (RunState's counters take its lock)
        try:
            return send(units, reqs)
        except STOPS_RUN:
            raise  # the model cannot run at all (a refused key, a missing model): stop
        except Exception as err:  # noqa: BLE001 - retry alone so one bad request cannot sink its batch
            if len(units) == 1:  # already alone: its retries are spent, it is a failed sample
                return [ModelOutput.failed(err)]
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
                batch = next_batch(todo, i, group, batch_size)
                i += len(batch)
                units, reqs = requests_for(batch, prepare_audio, out)
                bar.update(len(batch) - len(units))  # the failed samples are done
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
                    if cache is not None and res.error is None:
                        cache.put(u.key, res.to_json())
                bar.update(len(units))
                failures.add(results, adapter)
        finished = True
    finally:
        # on an error or Ctrl+C: answers already received stay cached, queued batches are
        # dropped and the requests in flight are not waited for
        pool.shutdown(wait=finished, cancel_futures=True)
