"""How a run schedules its work: --batch_size auto (the same results as batch 1; on CUDA it
starts large and halves on out-of-memory), the order units run in (every group as far along
as the run, so the ETA holds; a family's scenes together, families in a hashed order), CPU
threads per process, and progress as plain lines outside a terminal."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import harness_cli, tiny_dataset

FIX = str(Path(__file__).parent / "fixtures")


@pytest.fixture(scope="module")
def ds(tmp_path_factory) -> Path:
    return tiny_dataset(tmp_path_factory.mktemp("sched") / "ds", 10, "sched")


def test_batch_size_auto_gives_the_same_results_as_batch_1(ds, tmp_path, monkeypatch):
    from harness import config as flags
    from harness import simple_evaluate

    monkeypatch.syspath_prepend(FIX)
    assert flags.resolve_batch_size("auto", "cpu") == (flags.AUTO_CPU_BATCH, False)
    assert flags.resolve_batch_size("auto", "cuda:0") == (flags.AUTO_CUDA_START, True)
    # the tiny dataset has no stems: an adapter that takes audio runs the full mixture only (the
    # layer conditions are refused up front when the scenes config cannot render them)
    for model, conds in (("random", "all"), ("plugin_adapters:AudioHashAdapter", "full")):
        one = simple_evaluate(
            model, tasks="role_inference", dataset=str(ds), probe=False, batch_size=1, conditions=conds
        )
        auto = simple_evaluate(
            model, tasks="role_inference", dataset=str(ds), probe=False, batch_size="auto", conditions=conds
        )
        assert auto.results == one.results and auto["config"]["batch_size"] == "auto"
        assert [r.get("response") for r in auto.samples["role_inference"]] == [
            r.get("response") for r in one.samples["role_inference"]
        ]


def test_auto_batch_halves_on_out_of_memory(ds):
    """On CUDA, --batch_size auto starts large and halves until a batch fits; results unchanged."""
    from harness.run.data import CasuData
    from harness.run.runner import RunState, make_units, process
    from harness.task.config import load_tasks
    from model_adapters.baselines import RandomBaseline

    class OutOfMemoryError(RuntimeError):
        pass

    class Small(RandomBaseline):
        sizes: list = []

        def loglikelihood(self, reqs):
            self.sizes.append(len(reqs))
            if len(reqs) > 3:
                raise OutOfMemoryError("CUDA out of memory")
            return super().loglikelihood(reqs)

    data = CasuData(str(ds))
    t = load_tasks()["role_inference"]
    from harness.run.conditions import FULL

    a = Small()
    units = make_units(
        t, data.samples(t.dataset_config, t.split), [FULL], a, "loglikelihood", False, False, ["k"]
    )
    state = RunState()
    got = process(units, a, data, None, 16, state, progress=False, shrink_on_oom=True)
    ref = process(units, RandomBaseline(), data, None, 1, RunState(), progress=False)
    assert got == ref and state.batch_size == 2 and max(a.sizes[a.sizes.index(2) :]) == 2


def test_run_order_keeps_every_group_as_far_along_as_the_run(ds):
    """Slow free-text units are spread over the run, so the ETA (rate so far x units left) is right."""
    from harness.run.conditions import FULL
    from harness.run.data import CasuData
    from harness.run.runner import interleave, make_units, settings_for
    from harness.task.config import load_tasks
    from model_adapters.baselines import RandomBaseline

    data = CasuData(str(ds))
    t = load_tasks()["role_inference"]
    slow = t.model_copy(
        update={"generation": t.generation.model_copy(update={"max_new_tokens": 200}), "task": "slow_one"}
    )
    samples = data.samples(t.dataset_config, t.split)
    units = make_units(t, samples, [FULL], RandomBaseline(), "generate", False, False, ["k"]) + make_units(
        slow, samples[:4], [FULL], RandomBaseline(), "generate", False, False, ["k"]
    )

    def group(u):
        return u.mode, tuple(sorted(settings_for(u.task).to_dict().items()))

    for bs in (1, 2, 3):
        order = interleave(units, group, bs)
        assert sorted(u.key for u in order) == sorted(u.key for u in units)
        assert order == interleave(list(reversed(units)), group, bs)  # deterministic
        n_slow = sum(u.task.task == "slow_one" for u in units)
        for i in range(1, len(order) + 1):  # at each point the slow share done tracks the run's share done
            done = sum(u.task.task == "slow_one" for u in order[:i]) / n_slow
            assert abs(done - i / len(order)) <= bs / n_slow + 1e-9, (bs, i)


def test_run_order_keeps_a_familys_scenes_together_in_a_hashed_family_order(ds):
    """A family's variants share work (one transcript per clip, one blind score per question):
    they run together, and families come in a hashed (not by-name) order so the cost per unit
    does not drift over a --limit run, whose first families by name cover more tasks."""
    import dataclasses

    from harness.run.conditions import FULL
    from harness.run.data import CasuData
    from harness.run.runner import interleave, make_units
    from harness.task.config import load_tasks
    from model_adapters.baselines import RandomBaseline

    t = load_tasks()["role_inference"]
    samples = CasuData(str(ds)).samples(t.dataset_config, t.split)
    fams = [f"fam{i // 2:02d}" for i in range(len(samples))]  # five families of two scenes
    samples = [dataclasses.replace(s, family_id=f) for s, f in zip(samples, fams)]
    units = make_units(t, samples, [FULL], RandomBaseline(), "generate", False, False, ["k"])
    order = interleave(units, lambda u: u.mode, 1)
    seq = [u.sample.family_id for u in order]
    runs = [f for i, f in enumerate(seq) if i == 0 or seq[i - 1] != f]
    assert sorted(runs) == sorted(set(seq))  # each family is one contiguous run
    assert runs != sorted(runs)  # and families are not in name order


def test_cpu_threads_default_and_overrides(monkeypatch):
    import os

    from model_adapters.cascade import cpu_threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    for cores, want in ((1, 1), (2, 1), (4, 2), (8, 4), (64, 4)):
        monkeypatch.setattr(os, "sched_getaffinity", lambda _pid, n=cores: set(range(n)))
        assert cpu_threads() == want
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert cpu_threads() == 3 and cpu_threads(2) == 2
    with pytest.raises(ValueError, match="threads must be >= 1"):
        cpu_threads(0)


def test_progress_outside_a_terminal_is_plain_lines(ds, tmp_path):
    rc, out, err = harness_cli(
        "--model",
        "random",
        "--tasks",
        "role_inference",
        "--dataset",
        str(ds),
        "--output_path",
        str(tmp_path / "r"),
        "--no_probe",
    )  # stderr is a StringIO here, as in a log file
    assert rc == 0, err
    assert "\r" not in err and "\x1b" not in err
    lines = [x for x in err.splitlines() if x.startswith("random: ")]
    assert lines and lines[-1].startswith("random: 10/10 (100%)")
