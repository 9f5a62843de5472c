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
