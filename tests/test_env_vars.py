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


def test_the_hub_goes_offline_for_a_command_only_where_the_user_did_not_say(monkeypatch):
    from casu_dataset.cli.common import hub_offline

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "0")  # the user's own choice stays
    with hub_offline():
        assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["TRANSFORMERS_OFFLINE"] == "0"
    assert "HF_HUB_OFFLINE" not in os.environ and os.environ["TRANSFORMERS_OFFLINE"] == "0"
