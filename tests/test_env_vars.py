"""core.env_vars.environment: variables set or unset for a block, then exactly as they were."""

import os

import pytest

from casu_dataset.core.env_vars import environment


def test_variables_are_set_unset_and_restored_even_when_the_block_raises(monkeypatch):
    monkeypatch.setenv("CASU_T_SET", "old")
    monkeypatch.delenv("CASU_T_UNSET", raising=False)
    monkeypatch.setenv("CASU_T_GONE", "here")
    with pytest.raises(RuntimeError):
        with environment({"CASU_T_SET": "new", "CASU_T_UNSET": "1", "CASU_T_GONE": None}):
            assert os.environ["CASU_T_SET"] == "new" and os.environ["CASU_T_UNSET"] == "1"
            assert "CASU_T_GONE" not in os.environ
            raise RuntimeError("inside")
    assert os.environ["CASU_T_SET"] == "old" and os.environ["CASU_T_GONE"] == "here"
    assert "CASU_T_UNSET" not in os.environ
