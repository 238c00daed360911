"""`build --executor ray` on a two-node Ray cluster on this machine (a head and a worker node, one
CPU each, as `ray start --head` plus `ray start --address HEAD` on two machines): an actor on each
node, and the same bytes as a local build."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import folder_bytes

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[ray]')")

from casu_dataset.dataset.build import build_dataset  # noqa: E402
from casu_dataset.dataset.config import BuildConfig  # noqa: E402
from casu_dataset.families.compile import compile_families  # noqa: E402
from casu_dataset.mix.realize import make_builder  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "families" / "two_families.yaml"


def _build(out, spec, cache, executor="local"):
    config = BuildConfig(
        out=out, cache=cache, progress=False, executor=executor, max_skips=None, name="ray fixture"
    )
    return build_dataset(config, compile_families(FIXTURE), make_builder(spec), builder_spec=spec)


def test_two_node_cluster_builds_the_same_bytes(session_cache, tmp_path):
    from ray.cluster_utils import Cluster

    spec = {"cache": str(session_cache), "check_speech": False, "alpha": 0.6}
    local = _build(tmp_path / "local", spec, tmp_path / "cache_local")
    assert len(local.built) == 8 and not local.skipped
    two = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        two.add_node(num_cpus=1)
        ray.init(address=two.address, include_dashboard=False, log_to_driver=False, configure_logging=False)
        assert len([n for n in ray.nodes() if n["Alive"]]) == 2
        rep = _build(tmp_path / "ray", spec, tmp_path / "cache_ray", "ray")
        assert rep.built == local.built and rep.cached == 8  # every scene came from the actors
        assert folder_bytes(tmp_path / "ray") == folder_bytes(tmp_path / "local")
        # An actor on each node (one CPU each), and neither loaded a model.
        models = rep.workers["worker_models"]
        assert len(models) == 2 and all(m == [] for m in models.values()), models
    finally:
        ray.shutdown()
        two.shutdown()
