"""training/flag_spec.py is the one home of each flag: its absl flag (option_flags.py)
and its Config field (training/config.py) are made from it and agree with it."""

from __future__ import annotations

import dataclasses
import pickle

import pytest
from absl import flags

import option_flags
from training.config import DERIVED, Config, config_fields, make_config
from training.flag_spec import FLAG_SPECS, SPECS_BY_NAME, FlagSpec

ABSL_PARSER = {"bool": flags.BooleanParser, "int": flags.IntegerParser,
               "float": flags.FloatParser, "str": flags.ArgumentParser,
               "enum": flags.EnumParser}


def test_every_config_field_is_a_flag_spec_and_every_flag_spec_a_config_field():
    derived = [f.name for f in dataclasses.fields(Config) if f.metadata == DERIVED]
    assert derived == ["env_kind", "replay_specs", "n_envs", "store_features", "off_policy"]
    assert config_fields() == [spec.name for spec in FLAG_SPECS]
    assert len(SPECS_BY_NAME) == len(FLAG_SPECS)


def test_every_flag_spec_is_an_absl_flag_with_its_default_choices_and_help():
    for spec in FLAG_SPECS:
        flag = flags.FLAGS[spec.name]  # KeyError: a spec without an absl flag
        shown = f"<{'|'.join(spec.choices)}>: " if spec.kind == "enum" else ""  # absl's
        assert (flag.default, flag.help) == (spec.default, shown + spec.help), spec.name
        assert type(flag.default) is type(spec.default), spec.name
        assert isinstance(flag.parser, ABSL_PARSER[spec.kind]), spec.name
        assert flag.boolean == (spec.kind == "bool"), spec.name
        assert getattr(flag.parser, "enum_values", None) == \
            (list(spec.choices) if spec.choices is not None else None), spec.name
    # every flag option_flags.py defines (absl's own aside) is a spec's
    ours = {f.name for f in flags.FLAGS.get_flags_for_module(option_flags)}
    assert ours == set(SPECS_BY_NAME)


def test_config_field_types_follow_the_kind_and_the_auto_default():
    types = {f.name: f.type for f in dataclasses.fields(Config)}
    assert (types["seed"], types["batch_size"], types["agent"], types["clip_rewards"],
            types["stop_at_return"], types["status_interval"]) == \
        ("int", "int | None", "str | None", "bool | None", "float | None", "float")
    sections = list(dict.fromkeys(spec.section for spec in FLAG_SPECS))
    assert sections[:3] == ["general", "environment", "training"] and sections[-1] == "logging"


@pytest.mark.parametrize("bad", [
    dict(kind="list"), dict(kind="int", default=1.0), dict(kind="float", default=1),
    dict(kind="int", default=True), dict(kind="str", choices=("a",)),
    dict(kind="enum", default="c", choices=("a", "b")), dict(kind="enum", default=None)])
def test_a_flag_spec_that_contradicts_itself_is_refused(bad):
    with pytest.raises(ValueError):
        FlagSpec(**{"name": "x", "default": None, "help": "h", **bad})


def test_a_config_is_frozen_hashable_and_survives_pickling():
    cfg, errors = make_config(option_flags.default_values(env="CartPole-v1", replays="elite3"))
    assert not errors
    copy = pickle.loads(pickle.dumps(cfg))  # as sent to spawned actor processes
    assert type(copy) is Config and copy == cfg and hash(copy) == hash(cfg)
    assert copy.to_dict() == cfg.to_dict() and copy.replay_specs == cfg.replay_specs
    assert (copy.env_kind, copy.n_envs, copy.store_features) == \
        (cfg.env_kind, cfg.n_envs, cfg.store_features)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.lr = 1.0


def test_read_when_names_another_flag_and_values_it_can_take():
    conditional = [s for s in FLAG_SPECS if s.read_when is not None]
    assert {s.name for s in conditional} == {"lstm_size", "video_format", "ray_address",
                                             "max_policy_lag", "ray_in_flight", "ray_weights_every",
                                             "ray_actor_timeout", "ray_actor_node"}
    for spec in conditional:
        chooser, values = spec.read_when
        other = SPECS_BY_NAME[chooser]
        allowed = {"true", "false"} if other.kind == "bool" else set(other.choices)
        assert values and set(values) <= allowed, (spec.name, values)
