"""`build --executor ray` with no cluster to join starts a local one of its own: ray.init's processes
less the autoscaler's monitor and the log monitor (ray_executor._start_local), the same bytes as a
local build, and every process of it gone when the build returns."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import folder_bytes

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[ray]')")

FIXTURE = Path(__file__).parent / "fixtures" / "families" / "two_families.yaml"

# Its own process: no other test's cluster is connected there, and RAY_ADDRESS is unset.
BUILD = r"""
import json, sys
from pathlib import Path
import psutil, ray
from casu_dataset.dataset import ray_executor as rx
from casu_dataset.dataset.build import build_dataset
from casu_dataset.dataset.config import BuildConfig
from casu_dataset.families.compile import compile_families
from casu_dataset.mix.realize import make_builder

spec, fixture, out, cache = json.loads(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])
rx.warm_ray(spec, None, num_cpus=2)  # as api.build does first thing
node = rx._LOCAL[0]
kinds = sorted(node.all_processes)
pids = [p.process.pid for ps in node.all_processes.values() for p in ps]
config = BuildConfig(out=out, cache=cache, progress=False, executor="ray", max_skips=None, name="ray fixture")
rep = build_dataset(config, compile_families(fixture), make_builder(spec), builder_spec=spec)
print(json.dumps({
    "kinds": kinds,
    "alive_after": [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"],
    "local_after": len(rx._LOCAL),
    "connected_after": ray.is_initialized(),
    "warm_actors": rep.workers.get("warm_actors"),
    "models": list(rep.workers.get("worker_models", {}).values()),
    "built": len(rep.built),
}))
"""


def test_a_build_starts_a_lean_local_cluster_and_stops_it(session_cache, tmp_path):
    from casu_dataset.dataset.build import build_dataset
    from casu_dataset.dataset.config import BuildConfig
    from casu_dataset.families.compile import compile_families
    from casu_dataset.mix.realize import make_builder

    spec = {"cache": str(session_cache), "check_speech": False, "alpha": 0.6}
    config = BuildConfig(
        out=tmp_path / "local", cache=tmp_path / "c1", progress=False, max_skips=None, name="ray fixture"
    )
    build_dataset(config, compile_families(FIXTURE), make_builder(spec), builder_spec=spec)

    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    p = subprocess.run(
        [
            sys.executable,
            "-c",
            BUILD,
            json.dumps(spec),
            str(FIXTURE),
            str(tmp_path / "ray"),
            str(tmp_path / "c2"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert "raylet" in res["kinds"] and "gcs_server" in res["kinds"], res["kinds"]
    assert "monitor" not in res["kinds"] and "log_monitor" not in res["kinds"], res["kinds"]
    assert res["warm_actors"] == 2 and res["built"] == 8 and all(m == [] for m in res["models"])
    # Stopped by the build (while its files were written), not left to the interpreter's exit.
    assert res["local_after"] == 0 and not res["connected_after"] and res["alive_after"] == []
    assert folder_bytes(tmp_path / "ray") == folder_bytes(tmp_path / "local")


def test_without_the_private_node_api_ray_init_starts_the_cluster(monkeypatch):
    """A Ray whose private Node API is not the pinned one's: _start_local says so (None), and
    _connect falls back to ray.init's own local cluster."""
    import ray._private.node

    from casu_dataset.dataset import ray_executor as rx

    def other_node(*a, **kw):
        raise TypeError("Node() got an unexpected keyword argument 'spawn_reaper'")

    monkeypatch.setattr(ray._private.node, "Node", other_node)
    assert rx._start_local(1) is None and rx._LOCAL == []
    calls = []
    fake = type(
        "FakeRay",
        (),
        {"is_initialized": staticmethod(lambda: False), "init": staticmethod(lambda **kw: calls.append(kw))},
    )
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert rx._connect(fake, None, 1) is True
    assert calls == [
        {"num_cpus": 1, "include_dashboard": False, "log_to_driver": False, "configure_logging": False}
    ]
    # RAY_ADDRESS names the cluster to join: ray.init reads it; nothing is started here
    calls.clear()
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    assert rx._connect(fake, None, None) is True and rx._LOCAL == []
    assert calls == [
        {"address": None, "include_dashboard": False, "log_to_driver": False, "configure_logging": False}
    ]
