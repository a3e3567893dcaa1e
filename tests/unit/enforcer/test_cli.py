"""``kube-offload enforcer`` flags: defaults, environment variables, duration parsing."""

from __future__ import annotations

import argparse

import pytest

from enforcer.cli import register
from kube_offload.runtime.flags import positive_duration as parse_duration  # the type --resync-period uses


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kube-offload")
    register(parser.add_subparsers())
    return parser.parse_args(["enforcer", *argv])


def test_defaults():
    args = parse([])
    assert (args.kubeconfig, args.workers, args.resync_period, args.install_crd, args.namespace) == (
        None, 4, 300.0, False, None)
    assert (args.log_level, args.log_json) == ("INFO", False)
    assert (args.consumer_twin_role, args.consumer_status_period) == ("kube-offload-consumer-twin", 2.0)
    assert args.func.__module__ == "enforcer.cli"


def test_provider_loop_flags(monkeypatch):
    args = parse(["--consumer-twin-role", "r-consumer-twin", "--consumer-status-period", "500ms"])
    assert (args.consumer_twin_role, args.consumer_status_period) == ("r-consumer-twin", 0.5)
    monkeypatch.setenv("KUBE_OFFLOAD_ENFORCER_CONSUMER_TWIN_ROLE", "from-env")
    assert parse([]).consumer_twin_role == "from-env"


def test_command_line():
    args = parse(["--kubeconfig", "/k", "--workers", "8", "--resync-period", "90s", "--install-crd=true",
                  "--namespace", "team-a", "--log-level", "DEBUG", "--log-json", "yes"])
    assert (args.kubeconfig, args.workers, args.resync_period, args.install_crd, args.namespace) == (
        "/k", 8, 90.0, True, "team-a")
    assert (args.log_level, args.log_json) == ("DEBUG", True)


def test_environment_and_command_line_precedence(monkeypatch):
    monkeypatch.setenv("KUBE_OFFLOAD_ENFORCER_RESYNC_PERIOD", "2m")
    monkeypatch.setenv("KUBE_OFFLOAD_ENFORCER_INSTALL_CRD", "true")
    monkeypatch.setenv("KUBE_OFFLOAD_ENFORCER_WORKERS", "2")
    args = parse([])
    assert (args.resync_period, args.install_crd, args.workers) == (120.0, True, 2)
    assert parse(["--workers", "3"]).workers == 3


def test_bad_environment_value_exits_with_the_variable_named(monkeypatch):
    monkeypatch.setenv("KUBE_OFFLOAD_ENFORCER_RESYNC_PERIOD", "soon")
    with pytest.raises(SystemExit, match="KUBE_OFFLOAD_ENFORCER_RESYNC_PERIOD"):
        parse([])


@pytest.mark.parametrize("text,seconds", [("300", 300.0), ("300s", 300.0), ("5m", 300.0), ("1h", 3600.0),
                                          ("250ms", 0.25), ("1.5m", 90.0),
                                          ("1m0.5s", 60.5), ("1d", 86400.0)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5 minutes", "-1s", "0", "1x", "d"])
def test_parse_duration_rejects(text):
    with pytest.raises(argparse.ArgumentTypeError):
        parse_duration(text)


def test_workers_must_be_positive(capsys):
    with pytest.raises(SystemExit):
        parse(["--workers", "0"])


def test_webhooks_run_in_the_enforcers_process_unless_told():
    assert parse([]).webhook_process == "shared"
    assert parse(["--webhook-process", "own"]).webhook_process == "own"
    with pytest.raises(SystemExit):
        parse(["--webhook-process", "both"])


def test_the_webhook_process_gets_every_setting_the_enforcer_has():
    """The child's command line, parsed as the child parses it, gives its webhooks the
    settings the enforcer was given (a flag dropped on the way would serve with a default)."""
    from enforcer.cli import run_webhook, webhook_process_argv

    given = parse([
        "--kubeconfig", "/k", "--resync-period", "90s", "--log-level", "DEBUG", "--log-json", "yes",
        "--list-page-size", "123", "--gc-thaw-period", "0", "--gil-switch-interval", "1ms", "--cluster-id", "prov-a",
        "--webhook-bind", "127.0.0.1:9555", "--webhook-tls-cert", "/c.crt", "--webhook-tls-key", "/c.key",
        "--webhook-verdict-cache-ttl", "3.5", "--webhook-verdict-cache-entries", "77",
    ])
    argv = webhook_process_argv(given)
    assert argv[1:5] == ["-m", "kube_offload.cli", "enforcer", "webhook"]
    child = parse(argv[4:])
    assert child.func is run_webhook
    shared = ["kubeconfig", "resync_period", "log_level", "log_json", "list_page_size", "gc_thaw_period",
              "gil_switch_interval", "cluster_id", "webhook_bind", "webhook_tls_cert", "webhook_tls_key",
              "webhook_verdict_cache_ttl", "webhook_verdict_cache_entries"]
    assert {name: getattr(child, name) for name in shared} == {name: getattr(given, name) for name in shared}
    # Without --kubeconfig the child too finds its in-cluster identity.
    assert parse(webhook_process_argv(parse(["--webhook-tls-cert", "/c", "--webhook-tls-key", "/k"]))[4:]).kubeconfig is None
