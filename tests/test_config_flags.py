"""``OtcaConfig``: one dataclass whose fields are the flags; clear errors; a round trip through argv."""
import pytest

from otca_patch.config import OtcaConfig, config_from_environment, parse_otca_args
from otca_patch.credit import CreditConfig
from otca_patch.env_names import ARGS as ENV_ARGS


def test_flags_are_split_from_upstream_arguments_in_order():
    config, rest = parse_otca_args(["--seed", "42", "--otca", "--otca_rewards", "upstream,clip_t", "--h", "720",
                                    "--otca_reward_ckpt", "clip_t=/ckpt/clip.safetensors", "--otca_w_min=0.25",
                                    "--otca_reward_opt", "clip_t.model_name=ViT-B-32,clip_t.quick_gelu=false"])
    assert rest == ["--seed", "42", "--h", "720"]
    assert config.otca and config.otca_rewards == ("upstream", "clip_t") and config.otca_w_min == 0.25
    assert config.otca_reward_ckpt == {"clip_t": "/ckpt/clip.safetensors"}
    assert config.otca_reward_opt == {"clip_t": {"model_name": "ViT-B-32", "quick_gelu": "false"}}  # text until the adapter converts it


def test_defaults_are_the_credit_engines():
    credit = OtcaConfig().credit_config()
    assert credit == CreditConfig()
    assert not OtcaConfig().active


def test_round_trip_through_argv():
    config = OtcaConfig(otca=True, otca_mode="moca", otca_rewards=("upstream", "aesthetic"),
                        otca_objective_weights=(1.0, 0.5), otca_reward_ckpt={"aesthetic": "/a.pth"},
                        otca_reward_opt={"aesthetic": {"clip_checkpoint": "/c.bin"}}, otca_explore=0.0)
    again, rest = parse_otca_args(config.to_argv())
    assert again == config and rest == []


@pytest.mark.parametrize("argv,message", [
    (["--otca_wmin", "0.3"], "unknown flag --otca_wmin; did you mean --otca_w_min?"),
    (["--otca_mod", "tcd"], "unknown flag --otca_mod; did you mean --otca_mode?"),
    (["--otca_mode", "otcaa"], "--otca_mode: invalid value 'otcaa'; did you mean otca? (choose from otca,"),
    (["--otca_mode", "best"], "--otca_mode: invalid value 'best' (choose from otca,"),
    (["--otca_w_min", "half"], "--otca_w_min: invalid float value: 'half'"),
    (["--otca_target", "dancegrpo-flux"], "--otca_target: expected NAME=PATH"),
    (["--otca", "--otca_w_min", "1.5"], "--otca_w_min: must lie in [0, 1]"),
    (["--otca", "--otca_explore", "-1"], "--otca_explore: must be >= 0"),
    (["--otca_rewards", "upstream,clip_t", "--otca_objective_weights", "1"], "1 weights for 2 objectives"),
    (["--otca_rewards", "upstream,upstream"], "objectives repeat"),
    (["--otca", "--otca_observe"], "exclude each other"),
    (["--otca_reward_ckpt", "clip_t"], "--otca_reward_ckpt: expected NAME=VALUE, got 'clip_t'"),
    (["--otca_mode"], "needs a value"),
])
def test_bad_flags_name_what_is_wrong(argv, message, capsys):
    with pytest.raises(ValueError) as raised:
        parse_otca_args(argv)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value) and len(str(raised.value)) < 200, "one short line, not every flag"
    assert capsys.readouterr().err == "", "no usage block printed on the side"


def test_otca_target_is_keyed_by_file_and_repeats():
    config, rest = parse_otca_args(["--otca_target", "dancegrpo-flux=a.py", "--otca_target",
                                    "dancegrpo-flux=b.py,dancegrpo-sd=c.py", "--lr", "1"])
    assert config.otca_target == {"a.py": "dancegrpo-flux", "b.py": "dancegrpo-flux", "c.py": "dancegrpo-sd"}
    assert rest == ["--lr", "1"]
    again, _ = parse_otca_args(config.to_argv())
    assert again == config


def test_environment_flags_are_merged_and_argv_wins(monkeypatch):
    monkeypatch.setenv(ENV_ARGS, "--otca --otca_mode tcd --otca_w_min 0.2")
    config, rest = config_from_environment(["--lr", "1", "--otca_mode", "moca"])
    assert config.otca and config.otca_mode == "moca" and config.otca_w_min == 0.2 and rest == ["--lr", "1"]
    monkeypatch.setenv(ENV_ARGS, "--otca --lr 1")
    with pytest.raises(ValueError, match="not otca-patch flags"):
        config_from_environment([])


def test_an_empty_log_dir_is_one_line_naming_the_flag():
    with pytest.raises(ValueError, match=r"^--otca_log_dir: empty; give the folder for run_log.jsonl"):
        parse_otca_args(["--otca", "--otca_log_dir="])


def test_the_rank_check_waits_as_long_as_the_process_group_by_default():
    assert OtcaConfig().otca_rank_check_timeout is None  # rank_check.window(): the group's own timeout
    assert parse_otca_args(["--otca", "--otca_rank_check_timeout", "300"])[0].otca_rank_check_timeout == 300


def test_flags_from_the_environment_are_said_unless_a_launch_set_them(monkeypatch):
    from otca_patch.config import environment_flags_note

    monkeypatch.delenv("OTCA_PATCH_COMMAND", raising=False)
    monkeypatch.delenv(ENV_ARGS, raising=False)
    assert environment_flags_note("otca-patch smoke") is None
    monkeypatch.setenv(ENV_ARGS, "--otca --otca_mode sum")  # a stale export in the user's shell
    assert environment_flags_note("otca-patch smoke") == (
        "otca-patch smoke: flags from $OTCA_PATCH_ARGS, not from the command line: --otca --otca_mode sum "
        "(`unset OTCA_PATCH_ARGS` to run without them)")
    monkeypatch.setenv("OTCA_PATCH_COMMAND", "otca-patch launch")  # the launch printed its flags already
    assert environment_flags_note("otca-patch smoke") is None


def test_a_stale_environment_flag_is_the_first_line_of_otca_patch_run(tmp_path):
    import os
    import subprocess
    import sys

    script = tmp_path / "plain.py"
    script.write_text("print('ran')\n")
    env = {k: v for k, v in os.environ.items() if k != "OTCA_PATCH_COMMAND"}
    done = subprocess.run([sys.executable, "-m", "otca_patch.cli", "run", str(script)], capture_output=True, text=True,
                          env=dict(env, **{ENV_ARGS: "--otca_mode sum"}), timeout=120, cwd=tmp_path)
    assert done.stderr.splitlines()[0].startswith("otca-patch run: flags from $OTCA_PATCH_ARGS, not from the "
                                                  "command line: --otca_mode sum"), done.stderr
    assert done.stdout == "ran\n"  # without --otca the script runs untouched, as said


def test_the_credit_flags_are_the_credit_configs_fields():
    """Every CreditConfig option a trainer can feed is an --otca_ flag with the engine's default and help."""
    from dataclasses import fields

    flags_by_name = {f.name: f for f in fields(OtcaConfig)}
    for option in fields(CreditConfig):
        name = "otca_" + option.name
        if option.metadata.get("library_only"):
            assert name not in flags_by_name
            continue
        assert flags_by_name[name].default == option.default and flags_by_name[name].metadata["help"]
        assert flags_by_name[name].metadata["help"] == option.metadata["help"]
    assert {"otca_reward_scale", "otca_coca_alpha", "otca_coca_window"}.isdisjoint(flags_by_name)
