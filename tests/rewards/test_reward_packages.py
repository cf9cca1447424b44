"""A reward says once what it needs installed (its class's ``missing_packages``) and where its files
are named (its ``checkpoint_slots``); the pre-launch check asks each registered reward, by no name."""
import pytest

from otca_patch.rewards import registry
from otca_patch.rewards.base import RewardModel
from otca_patch.rewards.checkpoints import CheckpointSpec
from otca_patch.rewards.packages import check_reward_packages, missing_package
from otca_patch.rewards.clip_libs import MissingPackage

WEIGHTS = CheckpointSpec(model="madeup", env_var="OTCA_CKPT_MADEUP", expected="a file")
VOCAB = CheckpointSpec(model="madeup", env_var="OTCA_CKPT_MADEUP_VOCAB", option="vocab", expected="a file")


class MadeUpReward(RewardModel):
    """A reward registered at run time, needing a package only for a checkpoint ending in .pkg."""

    checkpoint_slots = (("checkpoint", WEIGHTS, True), ("vocab", VOCAB, False))
    name = "madeup"

    @classmethod
    def missing_packages(cls, paths):
        if paths["checkpoint"] and paths["checkpoint"].endswith(".pkg"):
            return f"reward model 'madeup': {paths['checkpoint']} needs madeup_lib (vocab {paths['vocab']})"
        return None

    def _score(self, images, prompts):
        raise NotImplementedError


@pytest.fixture
def madeup():
    registry.register("madeup", MadeUpReward)
    yield
    registry._REGISTRY.pop("madeup")


def test_a_registered_reward_is_asked_with_the_paths_its_slots_name(madeup):
    env = {"OTCA_CKPT_MADEUP": "/weights.pkg", "OTCA_CKPT_MADEUP_VOCAB": "/vocab.txt"}
    assert missing_package("madeup", env=env) == "reward model 'madeup': /weights.pkg needs madeup_lib (vocab /vocab.txt)"
    # given paths come before the variables; an option names its own slot
    assert missing_package("madeup", "/given.pkg", {"vocab": "/v2"}, env=env) == \
        "reward model 'madeup': /given.pkg needs madeup_lib (vocab /v2)"
    assert missing_package("madeup", "/given.bin", env=env) is None
    assert missing_package("madeup", env={}) is None


def test_names_that_are_not_registry_rewards_need_nothing_here():
    for name in ("upstream", "upstream.vq", "jpeg_compressibility"):
        assert missing_package(name) is None
    registry.register("plain_factory", lambda **kwargs: None)  # a factory declares nothing
    try:
        assert missing_package("plain_factory") is None
    finally:
        registry._REGISTRY.pop("plain_factory")


def test_every_lacking_reward_is_one_line_of_one_error(madeup, monkeypatch):
    monkeypatch.setenv("OTCA_CKPT_MADEUP", "/a.pkg")
    monkeypatch.setattr(MadeUpReward, "missing_packages", classmethod(lambda cls, paths: f"{cls.name} lacks x"))
    with pytest.raises(MissingPackage) as raised:
        check_reward_packages(["madeup", "upstream", "madeup"], {}, {})
    assert str(raised.value) == "madeup lacks x\nmadeup lacks x"
    check_reward_packages(["upstream", "jpeg_compressibility"], {}, {})  # nothing to say: no error
