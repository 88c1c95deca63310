"""`trnsim.perf.zoo.config_field`: one reading of a config field that families name differently."""

import pytest

from trnsim.errors import InvalidArgumentError
from trnsim.perf.zoo import config_field


def test_first_key_set_wins_and_none_is_unset():
    config = {"hidden_size": None, "n_embd": 768, "d_model": 1024}
    assert config_field(config, "hidden_size", "n_embd", "d_model") == 768


def test_zero_is_a_value_not_a_missing_field():
    assert config_field({"n_inner": 0, "ffn_dim": 8}, "n_inner", "ffn_dim") == 0


def test_default_when_no_key_is_set():
    assert config_field({}, "num_key_value_heads", default=32) == 32


def test_missing_field_names_the_keys_and_the_model():
    with pytest.raises(InvalidArgumentError, match=r"'gpt-x' has none of hidden_size, n_embd"):
        config_field({"vocab_size": 10}, "hidden_size", "n_embd", name="gpt-x")
