"""The evaluation loop: tasks x conditions -> cached model calls -> scored records.

Every model output is written to the response cache as soon as its batch returns, keyed by
(model fingerprint, dataset fingerprint, task version, sample id, condition, rotation,
scoring mode, prompt hash, generation settings, system instruction; the adapter's fingerprint
covers a named chat template), so a killed run resumes where it stopped
and ends with the same results. A sample whose call fails is retried alone, then recorded
as an error; the run goes on. Under torchrun/accelerate the work units are split across
processes and gathered before scoring, so results do not depend on the process count.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from casu_dataset.core.errors import ModelError
from casu_dataset.core.llm.cache import ResponseCache
from casu_dataset.core.redact import redact_known
from casu_dataset.formats.reader import Row
from harness.run.batches import ModelOutput, Unit, next_batch, requests_for
from harness.run.concurrent import process_concurrently
from harness.run.conditions import FULL, Condition
from harness.run.data import CasuData
from harness.scoring.parsing import LETTERS, parse_choice
from harness.scoring.records import ScoredRecord
from harness.task.config import TaskConfig
from harness.task.lmeval_yaml import LmEvalYamlError
from harness.task.prompts import item, rotations, row_doc, task_prompt
from model_adapters.base import STOPS_RUN, Adapter, AdapterError, GenerationSettings, Request


@dataclass
class RunState:
    # Wall time with at least one model call in flight: with concurrent calls (an API adapter) a
    # sum over calls would exceed the run's own time and make the harness overhead negative.
    model_seconds: float = 0.0
    calls: int = 0
    cache_hits: int = 0
    batch_size: int | None = None  # the size --batch_size auto settled on (None: not shrunk)
    truncated: set = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _in_flight: int = 0
    _busy_since: float = 0.0

    def call_started(self) -> None:
        with self._lock:
            if self._in_flight == 0:
                self._busy_since = time.perf_counter()
            self._in_flight += 1

    def call_ended(self) -> None:
        with self._lock:
            self._in_flight -= 1
            self.calls += 1
            if self._in_flight == 0:
                self.model_seconds += time.perf_counter() - self._busy_since


def _h(parts: list) -> str:
    return ResponseCache.key(*parts)[:16]  # the same JSON-then-SHA-256 key as before, shortened


def settings_for(task: TaskConfig) -> GenerationSettings:
    g = task.generation
    return GenerationSettings(
        max_new_tokens=g.max_new_tokens,
        do_sample=g.do_sample,
        temperature=g.temperature,
        top_p=1.0 if g.top_p is None else g.top_p,
        top_k=g.top_k,
    ).check()


def choose_mode(task: TaskConfig, adapter: Adapter, scoring: str) -> str:
    if task.output_type != "multiple_choice":
        return "generate"
    if scoring == "loglikelihood":
        if not adapter.supports_loglikelihood:
            raise AdapterError(f"--scoring loglikelihood: --model {adapter.name} cannot score options")
        return "loglikelihood"
    if scoring == "generate":
        return "generate"
    return "loglikelihood" if adapter.prefers_loglikelihood and adapter.supports_loglikelihood else "generate"


def make_units(
    task: TaskConfig,
    samples: list[Row],
    conditions: list[Condition],
    adapter: Adapter,
    scoring: str,
    scene_hint: bool,
    circular: bool,
    base_key: list,
    system: str | None = None,
) -> list[Unit]:
    mode = choose_mode(task, adapter, scoring)
    settings = settings_for(task).to_dict()
    units = []
    for s in samples:
        # each rotation of the row (--circular): its options, key, reference and prompt
        asked = []
        for r in range(rotations(task, s, circular)):
            try:
                opts, ans, reference = item(task, s, r)
                prompt = task_prompt(task, s, opts, s.place if scene_hint else None, r)
            except LmEvalYamlError as err:  # a template that fails on this row (its budget, ...)
                raise LmEvalYamlError(
                    f"task {task.task!r} ({task.source_file}), row {s.id!r}"
                    + (f" (rotation {r})" if r else "")
                    + f": {err}"
                ) from None
            asked.append((r, opts, ans, reference, prompt))
        for c in conditions:
            for r, opts, ans, reference, prompt in asked:
                u = Unit(task, s, c, r, mode, prompt, opts, ans, system=system, reference=reference)
                # the system instruction and stop strings join the key only when given, so earlier
                # keys stay valid
                u.key = _h(
                    base_key
                    + [task.task, task.version, s.id, c.name, r, mode, prompt, opts, settings]
                    + ([{"system": system}] if system is not None else [])
                    + ([{"until": task.generation.until}] if task.generation.until else [])
                )
                units.append(u)
    return units


def _prepare_audio(u: Unit, data: CasuData, adapter: Adapter, state: RunState) -> np.ndarray | None:
    if not adapter.uses_audio:
        return None
    if u.audio_override == "silence":
        x = np.zeros_like(data.audio(u.sample, FULL))
    elif isinstance(u.audio_override, Row):
        x = data.audio(u.audio_override, FULL)
    else:
        x = data.audio(u.sample, u.condition)
    if adapter.sample_rate != 16000:
        import soxr

        x = soxr.resample(x, 16000, adapter.sample_rate).astype(np.float32)
    if adapter.max_audio_seconds and len(x) > adapter.max_audio_seconds * adapter.sample_rate:
        x = x[: int(adapter.max_audio_seconds * adapter.sample_rate)]
        state.truncated.add(u.key)
    return x


def _one_by_one(
    adapter: Adapter, units: list[Unit], reqs: list[Request], state: RunState
) -> list[ModelOutput]:
    """Each request alone, so one bad sample cannot sink its batch: a request that fails is a
    failed sample; an AdapterError (the model cannot run at all) or ModelArgsError stops the run."""
    results = []
    for u, r in zip(units, reqs):
        try:
            results.extend(_call(adapter, [u], [r], state))
        except STOPS_RUN:
            raise
        except Exception as err:  # noqa: BLE001 - recorded as a failed sample
            results.append(ModelOutput.failed(err))
    return results


def _call(adapter: Adapter, units: list[Unit], reqs: list[Request], state: RunState) -> list[ModelOutput]:
    state.call_started()
    try:
        if units[0].mode == "loglikelihood":
            scores = _outputs(adapter, "loglikelihood", adapter.loglikelihood(reqs), units)
            return [ModelOutput(scores=_scores(adapter, s, u)) for s, u in zip(scores, units)]
        texts = _outputs(adapter, "generate", adapter.generate(reqs, settings_for(units[0].task)), units)
        for t, u in zip(texts, units):
            if not isinstance(t, str):
                raise ModelError(
                    f"--model {adapter.name}: generate() returned {_shown(t)} for sample {u.sample.id}; "
                    "it must return one str per request"
                )
        # A server that echoes the key puts it in its answer: masked before the samples and the cache.
        return [ModelOutput(response=redact_known(t)) for t in texts]
    finally:
        state.call_ended()


def _shown(value) -> str:
    text = " ".join(repr(value).split())
    return f"a {type(value).__name__} ({text[:40]}{'...' if len(text) > 40 else ''})"


def _outputs(adapter: Adapter, method: str, out, units: list[Unit]) -> list:
    """An adapter's list of outputs, one per request. Anything else is a ModelError naming the
    adapter and a sample (not an AdapterError, which stops the run at once): the batch is retried
    one by one, and each request still refused is a failed sample (RunFailures stops the run past
    25%)."""
    if not isinstance(out, (list, tuple)):
        raise ModelError(
            f"--model {adapter.name}: {method}() returned {_shown(out)} for {len(units)} request(s) "
            f"(sample {units[0].sample.id}, ...); it must return a list, one output per request"
        )
    if len(out) != len(units):
        raise ModelError(
            f"--model {adapter.name}: {method}() returned {len(out)} outputs for {len(units)} requests "
            f"(sample {units[0].sample.id}, ...)"
        )
    return list(out)


def _scores(adapter: Adapter, s, u: Unit) -> list[float]:
    """One request's option scores: a number per option."""
    ok = isinstance(s, (list, tuple, np.ndarray)) and len(s) == len(u.options)
    if ok:
        try:
            values = [float(x) for x in s]
        except (TypeError, ValueError):
            ok = False
    if not ok:
        raise ModelError(
            f"--model {adapter.name}: loglikelihood() returned {_shown(s)} for sample {u.sample.id}; it "
            f"must return {len(u.options)} numbers (one per option) per request"
        )
    return values


def _is_oom(err: BaseException) -> bool:
    return type(err).__name__ == "OutOfMemoryError" or "out of memory" in str(err).lower()


def interleave(units: list[Unit], group, batch_size: int) -> list[Unit]:
    """Units in run order: within a group (scoring mode + generation settings) by condition, scene,
    task, id, rotation, cut into batches; the groups' batches then merged in proportion, so that
    at any point each group is about as far along as the whole run. Slow groups (free-text
    description) run first would make the progress bar's ETA several times too long; this way
    the rate seen so far is the run's mean rate. Within a group, families (scenes outside a family) come in a
    hashed order, their scenes together: a family's variants share work (one transcript per clip,
    one blind score per question), and a `--limit` run's first families cover more tasks than its
    last, so by-name order would make the cost per unit drift over the run.
    Deterministic; results do not depend on order."""
    import hashlib

    def spread(s):  # a stable pseudo-random rank of the sample's family
        return hashlib.sha256((s.family_id or s.scene_id).encode()).hexdigest()

    by_group: dict = {}
    for u in sorted(
        units,
        key=lambda u: (
            group(u),
            u.condition.name,
            spread(u.sample),
            u.sample.scene_id,
            u.task.task,
            u.sample.id,
            u.rotation,
        ),
    ):
        by_group.setdefault(group(u), []).append(u)
    chunks = []
    for gi, us in enumerate(by_group.values()):
        parts = [us[i : i + batch_size] for i in range(0, len(us), batch_size)]
        chunks += [((k + 0.5) / len(parts), gi, part) for k, part in enumerate(parts)]
    return [u for _, _, part in sorted(chunks, key=lambda c: (c[0], c[1])) for u in part]


# A run stops (AdapterError, exit 3) when more than this share of its requests failed, once at
# least FAILURE_MIN_REQUESTS have finished: below it a failed request is a failed sample
# (counted, reported, not cached, so the next run retries it) and the run goes on.
FAILURE_RATE_LIMIT = 0.25
FAILURE_MIN_REQUESTS = 20


class RunFailures:
    """Counts finished and failed requests; raises once the failure rate passes the limit."""

    def __init__(self):
        self.done = self.failed = 0

    def add(self, results: list[ModelOutput], adapter: Adapter) -> None:
        self.done += len(results)
        self.failed += sum(r.error is not None for r in results)
        if self.done >= FAILURE_MIN_REQUESTS and self.failed > FAILURE_RATE_LIMIT * self.done:
            last = next((r.error for r in reversed(results) if r.error is not None), "")
            raise AdapterError(
                f"--model {adapter.name}: {self.failed} of {self.done} requests failed "
                f"(over {FAILURE_RATE_LIMIT:.0%}), so the run stops; the answers received are "
                f"cached and a rerun resumes from them. Last error: {last}"
            )


class PlainProgress:
    """The progress of a run where stderr is not a terminal (a log file, CI, a notebook's captured
    stream): one plain line at every 10% (and at the end), no carriage returns or escape codes."""

    def __init__(self, total: int, desc: str, file=None, step: float = 0.1):
        self.total, self.desc, self.file, self.step = total, desc, file or sys.stderr, step
        self.n, self.t0, self.next = 0, time.perf_counter(), step

    def update(self, k: int = 1) -> None:
        self.n += k
        if self.total and (self.n / self.total >= self.next or self.n >= self.total):
            while self.next <= self.n / self.total:
                self.next += self.step
            dt = time.perf_counter() - self.t0
            eta = dt / self.n * (self.total - self.n) if self.n else 0.0
            print(
                f"{self.desc}: {self.n}/{self.total} ({100 * self.n / self.total:.0f}%), {dt:.1f} s, "
                f"ETA {eta:.0f} s",
                file=self.file,
                flush=True,
            )

    def close(self) -> None:
        pass


def progress_bar(total: int, desc: str, enabled: bool):
    """tqdm on a terminal; PlainProgress lines elsewhere; nothing when disabled or empty."""
    from tqdm import tqdm

    if not enabled or not total:
        return tqdm(total=total, disable=True)
    if not getattr(sys.stderr, "isatty", lambda: False)():
        return PlainProgress(total, desc)
    return tqdm(total=total, desc=desc, file=sys.stderr)


def process(
    units: list[Unit],
    adapter: Adapter,
    data: CasuData,
    cache,
    batch_size: int,
    state: RunState,
    progress: bool = True,
    shrink_on_oom: bool = False,
) -> dict[str, ModelOutput]:
    """key -> the model's output; cached outputs are reused, new ones cached at once."""
    out: dict[str, ModelOutput] = {}
    todo = []
    for u in units:
        hit = ModelOutput.from_json(h) if cache is not None and (h := cache.get(u.key)) is not None else None
        # an entry that is no reply of the unit's mode (not one this harness wrote) is asked again
        if hit is not None and hit.answers(u.mode):
            out[u.key] = hit
            state.cache_hits += 1
        else:
            todo.append(u)

    # Neighbouring units share a scene (its decoded, conditioned audio, and in a cascade its
    # transcript); a batch holds units with one scoring mode and one set of generation settings.
    def group(u):
        return u.mode, tuple(sorted(settings_for(u.task).to_dict().items()))

    todo = interleave(todo, group, batch_size)
    bar = progress_bar(len(todo), adapter.name, progress)
    failures = RunFailures()
    if getattr(adapter, "concurrency", 1) > 1:  # an API: requests in flight, whatever the batch size
        process_concurrently(
            todo,
            group,
            adapter,
            cache,
            batch_size,
            out,
            bar,
            failures,
            prepare_audio=lambda u: _prepare_audio(u, data, adapter, state),
            send=lambda us, reqs: _call(adapter, us, reqs, state),
            one_by_one=lambda us, reqs: _one_by_one(adapter, us, reqs, state),
        )
        bar.close()
        return out
    i = 0
    while i < len(todo):
        batch = next_batch(todo, i, group, batch_size)
        ok_units, reqs = requests_for(batch, lambda u: _prepare_audio(u, data, adapter, state), out)
        results = None
        if ok_units:
            try:
                results = _call(adapter, ok_units, reqs, state)
            except STOPS_RUN:
                raise  # the model cannot run at all (missing weights, bad args): stop with its message
            except Exception as err:
                if shrink_on_oom and len(batch) > 1 and _is_oom(err):
                    # --batch_size auto: this batch does not fit; retry it (and the rest) at half the size
                    _free_cuda()
                    batch_size = state.batch_size = max(1, len(batch) // 2)
                    for u in batch:
                        out.pop(u.key, None)
                    continue
                results = None
            if results is None:  # retry one by one, so one bad sample cannot sink its batch
                results = _one_by_one(adapter, ok_units, reqs, state)
            for u, res in zip(ok_units, results):
                out[u.key] = res
                if cache is not None and res.error is None:
                    cache.put(u.key, res.to_json())
            failures.add(results, adapter)
        bar.update(len(batch))
        i += len(batch)
    bar.close()
    return out


def _free_cuda() -> None:
    try:
        import torch

        torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001 - best effort
        pass


def score_unit(u: Unit, res: ModelOutput, judge=None) -> ScoredRecord:
    """The model's output for one unit, scored: parsed and checked against the key, or kept with
    its reference for the description metrics."""
    s = u.sample
    mcq = u.task.output_type == "multiple_choice"
    rec = ScoredRecord(
        id=s.id,
        task=u.task.task,
        condition=u.condition.name,
        rotation=u.rotation,
        scene_id=s.scene_id,
        place=s.place,
        speech_type=s.speech_type,
        layers=s.layers,
        minimal_pair_id=s.minimal_pair_id,
        mode=u.mode,
        question=s.question,
        prompt=u.prompt,
        options=u.options,
        answer=u.answer,
        multiple_choice=mcq,
        system=u.system,
    )
    if s.family_id:
        rec.family_id, rec.variant = s.family_id, s.variant
        rec.family_shape, rec.slot_kind = s.family_shape, s.slot_kind
    if (
        mcq
        and u.task.is_lmeval_style
        and list(row_doc(s, u.rotation).get("options") or []) != list(u.options)
    ):
        # the choices are not the row's options (e.g. mmlu's letters): the row's column, as stored,
        # for lm-eval's `doc` (output/lmeval.py)
        rec.metrics["doc_options"] = list(s.options or [])
    if res.error is not None:
        rec.error, rec.correct, rec.parsed, rec.method = res.error, False, None, "error"
        return rec
    response = res.response
    if isinstance(response, str) and u.task.generation.until:  # lm-eval's `until`: cut at the first stop
        for stop in u.task.generation.until:
            response = response.split(stop, 1)[0]
    if mcq:
        if u.mode == "loglikelihood":
            sc = res.scores
            best = [i for i, v in enumerate(sc) if v == max(sc)] if sc and np.all(np.isfinite(sc)) else []
            letter = LETTERS[best[0]] if len(best) == 1 else None  # a tie is not broken at random
            rec.scores, rec.parsed, rec.method = sc, letter, "loglikelihood" if letter else "unparsed"
        else:
            p = parse_choice(response, u.options, judge=judge, question=s.question)
            rec.response, rec.parsed, rec.method = response, p.letter, p.method
        rec.correct = rec.parsed == u.answer
    else:
        rec.response = response
        rec.reference = s.reference if u.reference is None else u.reference
        rec.event_descriptions, rec.turns = s.event_descriptions, s.turns
    return rec


def distributed_state():
    """accelerate's PartialState under torchrun / accelerate launch; None in one process."""
    from harness.config import world_size

    if world_size() > 1:
        from accelerate import PartialState

        return PartialState()
    return None


def run_units(
    units: list[Unit],
    adapter,
    data,
    cache,
    batch_size,
    state: RunState,
    progress=True,
    shrink_on_oom: bool = False,
) -> dict[str, ModelOutput]:
    dist = distributed_state()
    if dist is None:
        return process(units, adapter, data, cache, batch_size, state, progress, shrink_on_oom)
    from accelerate.utils import gather_object

    with dist.split_between_processes(units) as mine:
        part = process(
            list(mine),
            adapter,
            data,
            cache,
            batch_size,
            state,
            progress and dist.is_main_process,
            shrink_on_oom,
        )
    merged: dict[str, ModelOutput] = {}
    for k, v in gather_object([(k, v) for k, v in part.items()]):
        merged[k] = v
    return merged
