"""The kube-offload CLI: every subcommand builds its parser and documents env + default."""

import pytest

from kube_offload.cli import SUBCOMMANDS, build_parser
from kube_offload.runtime.flags import env_name


def _subcommands(parser):
    action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return action.choices


def test_every_registered_module_adds_its_subcommand():
    names = set(_subcommands(build_parser()))
    assert {"webhook", "extender", "certs", "vkubelet", "enforcer", "binaries", "cluster", "demo"} <= names
    assert len(names) >= len(SUBCOMMANDS)


@pytest.mark.parametrize("command", ["webhook", "extender", "vkubelet", "enforcer", "cluster", "demo"])
def test_help_names_the_environment_variable_of_every_flag(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([command, "--help"])
    assert exit_info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "env KUBE_OFFLOAD_" in text and "default:" in text


@pytest.mark.parametrize("action", ["up", "down", "status"])
def test_cluster_actions_take_the_state_dir_after_the_action(action, tmp_path):
    args = build_parser().parse_args(["cluster", action, "--state-dir", str(tmp_path)])
    assert args.state_dir == str(tmp_path)


def test_environment_variable_sets_a_default(monkeypatch, tmp_path):
    monkeypatch.setenv(env_name("cluster", "--state-dir"), str(tmp_path))
    args = build_parser().parse_args(["cluster", "status"])
    assert args.state_dir == str(tmp_path)


def test_bad_environment_value_is_a_clear_exit(monkeypatch):
    monkeypatch.setenv(env_name("cluster", "--remotes"), "many")
    with pytest.raises(SystemExit) as exit_info:
        build_parser()
    assert "KUBE_OFFLOAD_CLUSTER_REMOTES" in str(exit_info.value.code)


def test_drain_takes_a_consumer_and_a_grace_and_undrain_a_consumer(capsys):
    args = build_parser().parse_args(["drain", "team-a", "--grace", "90s", "--no-wait"])
    assert (args.consumer, args.grace, args.wait) == ("team-a", 90.0, False)
    assert build_parser().parse_args(["drain", "team-a"]).grace == 300.0  # constants.DEFAULT_DRAIN_GRACE_SECONDS
    assert build_parser().parse_args(["drain", "team-a", "--grace", "0"]).grace == 0.0
    assert build_parser().parse_args(["undrain", "team-a"]).consumer == "team-a"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["drain", "team-a", "--grace", "-5s"])
    assert "--grace" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        build_parser().parse_args(["drain"])  # the consumer is required
    assert "CONSUMER" in capsys.readouterr().err
