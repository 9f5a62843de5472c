import pytest
from omegaconf import OmegaConf

from genlab.cli.validate import validate_config
from genlab.errors import ConfigError


def test_the_default_experiment_validates(compose_cfg):
    validate_config(compose_cfg([]))


@pytest.mark.parametrize(
    "override, message",
    [
        ("+model.n_layers=3", "model.n_layers' is not an argument of genlab.models.transformer_xl.TransformerXL "
                              "(did you mean 'n_layer'?)"),
        ("model.dropout=high", "model.dropout' must be float"),
        ("+trainer.max_step=3", "trainer.max_step' is not an argument"),
        ("+data.tgt_length=3", "data.tgt_length' is not an argument"),
        ("seed=one", "'seed' must be int"),
    ],
)
def test_misspelt_or_mistyped_keys_are_named(compose_cfg, override, message):
    with pytest.raises(ConfigError) as err:
        validate_config(compose_cfg([override]))
    assert message in str(err.value)


def test_unknown_top_level_key_is_named(compose_cfg):
    cfg = compose_cfg([])
    OmegaConf.set_struct(cfg, False)
    cfg.trainr = {"max_steps": 3}
    with pytest.raises(ConfigError, match="unknown top-level config key 'trainr' \\(did you mean 'trainer'\\?\\)"):
        validate_config(cfg)


def test_unimportable_target_is_named(compose_cfg):
    cfg = compose_cfg([])
    cfg.model._target_ = "genlab.models.nope.Model"
    with pytest.raises(ConfigError, match="model._target_"):
        validate_config(cfg)


def test_debug_presets_win_over_the_experiment(compose_cfg):
    cfg = compose_cfg(["experiment=txl_mini", "debug=limit"])
    assert cfg.trainer.max_steps == 20 and cfg.trainer.val_check_interval == 10


@pytest.mark.parametrize("overrides, message", [
    (["data.path=/data/wikitext-103"], "data.source=mini builds the offline stand-in"),
    (["experiment=xlnet_base_mini", "data.path=/data/corpus"], "Add data.corpus=text"),
])
def test_a_data_path_on_an_offline_tier_stops_instead_of_being_ignored(compose_cfg, overrides, message):
    """README: nothing falls back silently to another tier. A data.path the run would not read is an error."""
    with pytest.raises(ConfigError, match=message):
        validate_config(compose_cfg(overrides))


def test_a_data_path_with_the_path_tier_validates(compose_cfg):
    validate_config(compose_cfg(["data.source=path", "data.path=/data/wikitext-103"]))
    validate_config(compose_cfg(["experiment=xlnet_base_mini", "data.corpus=text", "data.path=/data/corpus"]))
