"""``kubectl offload`` flags, inputs and discovery rules (no cluster): what the user types,
what the local chart renders (real Helm), and the errors that say what to fix."""

from __future__ import annotations

import os

import pytest

from kube_offload import cli
from kube_offload import constants as c
from kubectl_offload import cli as plugin
from kubectl_offload import kubeconfigs as kc
from kubectl_offload.kubeconfigs import PluginError


def test_kubectl_offload_is_the_same_cli_under_kubectls_name(capsys):
    with pytest.raises(SystemExit):
        cli.build_parser("kubectl offload").parse_args(["--help"])
    out = capsys.readouterr().out
    assert out.startswith("usage: kubectl offload") and "explain" in out and "status" in out


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["explain", "pod", "web", "-n", "demo", "-o", "json", "--context", "ctx", "--kubeconfig", "k.yaml"],
         {"target": ["pod", "web"], "namespace": "demo", "output": "json", "context": "ctx", "kubeconfig": "k.yaml"}),
        (["explain", "-f", "pod.yaml", "--namespace", "demo"], {"filename": "pod.yaml", "namespace": "demo", "output": None}),
        (["status", "-o", "yaml", "--request-timeout", "3s"], {"output": "yaml", "request_timeout": 3.0}),
    ],
)
def test_kubectl_flags_parse_like_kubectl(argv, expected):
    args = cli.build_parser().parse_args(argv)
    assert {key: getattr(args, key) for key in expected} == expected


# --- kubectl's flags anywhere after `offload` ----------------------------------------------------
# (flag tokens, the attribute, its parsed value): every kubectl flag the plugin takes, in each spelling.
GLOBAL_FLAGS = [
    (["--kubeconfig", "k.yaml"], "kubeconfig", "k.yaml"),
    (["--kubeconfig=k.yaml"], "kubeconfig", "k.yaml"),
    (["--context", "ctx"], "context", "ctx"),
    (["--context=ctx"], "context", "ctx"),
    (["-n", "demo"], "namespace", "demo"),
    (["-ndemo"], "namespace", "demo"),
    (["--namespace", "demo"], "namespace", "demo"),
    (["--namespace=demo"], "namespace", "demo"),
    (["--request-timeout", "3s"], "request_timeout", 3.0),
    (["--request-timeout=3s"], "request_timeout", 3.0),
    (["-o", "yaml"], "output", "yaml"),
    (["--local-cluster-id", "here"], "local_cluster_id", "here"),
    (["--remote-kubeconfig", "r=r.yaml"], "remote_kubeconfig", ["r=r.yaml"]),
]
COMMANDS = [(["explain"], ["pod", "web"], {"target": ["pod", "web"]}), (["status"], [], {})]


def parse(argv):
    parser = cli.build_parser("kubectl offload")
    return parser.parse_args(cli.arrange_argv(parser, argv))


@pytest.mark.parametrize(("command", "positionals", "expected"), COMMANDS, ids=["explain", "status"])
@pytest.mark.parametrize(("flag", "attribute", "value"), GLOBAL_FLAGS, ids=[" ".join(f[0]) for f in GLOBAL_FLAGS])
def test_kubectl_flags_parse_before_and_after_the_command(command, positionals, expected, flag, attribute, value):
    orders = {
        "before": [*flag, *command, *positionals],  # kubectl offload --kubeconfig K explain pod web
        "after": [*command, *positionals, *flag],
        "between": [*command, *positionals[:1], *flag, *positionals[1:]],  # explain pod -n demo web
    }
    for order, argv in orders.items():
        args = parse(argv)
        assert getattr(args, attribute) == value, (order, argv)
        assert args.command == command[0] and {key: getattr(args, key) for key in expected} == expected, (order, argv)


def test_several_flags_on_both_sides_keep_their_values_and_the_later_wins():
    args = parse(["--kubeconfig", "k.yaml", "-n", "a", "explain", "-f", "pod.yaml", "--context", "ctx", "-n", "b"])
    assert (args.kubeconfig, args.context, args.namespace, args.filename, args.target) == ("k.yaml", "ctx", "b", "pod.yaml", [])
    # A value that happens to be a command's name is still the flag's value.
    args = parse(["--context", "status", "explain", "web"])
    assert (args.command, args.context, args.target) == ("explain", "status", ["web"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--bogus", "explain", "pod", "web"], "unknown flag --bogus before the command"),
        (["explain", "pod", "web", "--bogus"], "unknown flag --bogus for explain"),
        (["--user", "admin", "explain", "pod", "web"], "--user is a kubectl flag kubectl offload does not take: pick a kubeconfig context"),
        (["status", "--cluster=prod"], "--cluster is a kubectl flag kubectl offload does not take"),
        (["status", "--as", "someone"], "does not impersonate"),
        (["-f", "pod.yaml", "status"], "-f: status takes no such flag"),
        (["--kubeconfig"], "--kubeconfig needs a value"),
        (["explain", "web", "-n"], "-n needs a value"),
        (["--context", "ctx"], "no command after them"),
        (["--context", "ctx", "webhook"], "before 'webhook': only explain, status take these flags"),
    ],
)
def test_unknown_or_unusable_flags_exit_2_naming_the_flag_and_the_fix(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        parse(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_other_commands_and_help_are_left_to_argparse():
    parser = cli.build_parser()
    for argv in (["--help"], ["webhook", "--port", "9443"], ["peer", "--help"], ["explain", "--", "-web"], []):
        assert cli.arrange_argv(parser, argv) == argv


def test_output_other_than_json_or_yaml_is_refused(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.build_parser().parse_args(["status", "-o", "wide"])
    assert exited.value.code == 2 and "json" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("target", "name"),
    [(["pod", "web"], "web"), (["pods", "web"], "web"), (["po/web"], "web"), (["pod/web"], "web"), (["web"], "web")],
)
def test_pod_name_from(target, name):
    assert plugin.pod_name_from(target) == name


@pytest.mark.parametrize("target", [["deployment", "web"], ["pod"], ["pod", "a", "b"]])
def test_pod_name_from_refuses_what_is_not_a_pod(target):
    with pytest.raises(PluginError, match="only pods"):
        plugin.pod_name_from(target)


def test_pod_from_manifest_takes_the_namespace_kubectl_would():
    pod = {"kind": "Pod", "metadata": {"name": "web"}, "spec": {"containers": []}}
    assert plugin.pod_from_manifest([pod], None, "ctx-ns")["metadata"]["namespace"] == "ctx-ns"
    assert plugin.pod_from_manifest([pod], "demo", "ctx-ns")["metadata"]["namespace"] == "demo"
    declared = {**pod, "metadata": {"name": "web", "namespace": "prod"}}
    assert plugin.pod_from_manifest([declared], None, "ctx-ns")["metadata"]["namespace"] == "prod"
    with pytest.raises(PluginError, match="does not match -n 'demo'"):
        plugin.pod_from_manifest([declared], "demo", "ctx-ns")


def test_pod_from_manifest_uses_a_workloads_template_and_marks_daemonset_pods():
    template = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "a"}]}}
    deployment = {"kind": "Deployment", "metadata": {"name": "x"}, "spec": {"template": template}}
    pod = plugin.pod_from_manifest([None, deployment], None, "default")
    assert pod["kind"] == "Pod" and pod["spec"] == template["spec"] and pod["metadata"]["labels"] == {"app": "x"}
    daemonset = {**deployment, "kind": "DaemonSet"}
    assert plugin.pod_from_manifest([daemonset], None, "default")["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet"


@pytest.mark.parametrize(
    ("documents", "message"),
    [([], "holds no object"), (["text"], "not an object"), ([{"kind": "Service"}], "is not a Pod"),
     ([{"kind": "Pod", "metadata": {"name": "x"}}], "no spec")],
)
def test_pod_from_manifest_errors_name_the_fix(documents, message):
    with pytest.raises(PluginError, match=message):
        plugin.pod_from_manifest(documents, None, "default")


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (["remote-1=/tmp/a.yaml", "remote-2=b.yaml"], {"remote-1": "/tmp/a.yaml", "remote-2": "b.yaml"}),
        ([], {}),
    ],
)
def test_parse_remote_flags(values, expected):
    assert kc.parse_remote_flags(values) == expected


@pytest.mark.parametrize("value", ["remote-1", "=a.yaml", "remote-1=", " = "])
def test_parse_remote_flags_names_the_flag(value):
    with pytest.raises(PluginError, match="--remote-kubeconfig .*expected ID=PATH"):
        kc.parse_remote_flags([value])


@pytest.mark.parametrize(
    ("username", "local_id"),
    [
        ("system:serviceaccount:kube-offload-tenant-local:consumer", "local"),
        ("system:serviceaccount:kube-offload-tenant-eu-1:consumer", "eu-1"),
        ("system:serviceaccount:kube-offload-tenant-local:default", None),
        ("system:serviceaccount:default:consumer", None),
        ("kubernetes-admin", None),
    ],
)
def test_local_id_from_username(username, local_id):
    assert kc.local_id_from_username(username) == local_id


def test_context_namespace():
    contexts = [{"name": "a", "context": {"namespace": "team"}}, {"name": "b", "context": {}}]
    assert kc.context_namespace(contexts, contexts[0], None) == "team"
    assert kc.context_namespace(contexts, contexts[0], "b") == "default"
    with pytest.raises(PluginError, match="--context 'c' is not in the kubeconfig"):
        kc.context_namespace(contexts, contexts[0], "c")


def test_the_local_charts_deployments_tell_the_remote_kubeconfig_secret_and_the_local_id():
    """Read from what real Helm renders, so a chart change that breaks discovery fails here."""
    from kube_offload_harness import binaries, identities

    helm = binaries.binaries().helm
    if not os.access(helm, os.X_OK):
        if os.environ.get("CI") == "true":
            pytest.fail(f"helm is not in the binary cache ({helm}): kube-offload binaries build")
        pytest.skip(f"helm is not in the binary cache ({helm})")
    values = {"localClusterId": "home", "remoteClusters": [
        {"id": "remote-1", "kubeconfigSecret": "remote-1-kubeconfig"},
        {"id": "remote-2", "kubeconfigSecret": "custom", "kubeconfigKey": "config"},
    ]}
    rendered = identities.render_chart(helm, identities.LOCAL_CHART, values, env=dict(os.environ))
    deployments = [d for d in rendered if d.get("kind") == "Deployment"]
    found = {p.cluster_id: p for d in deployments if (p := kc.parse_vkubelet_deployment(d)) is not None}
    assert found == {
        "remote-1": kc.VkubeletDeployment("remote-1", identities.RELEASE_NAMESPACE, "remote-1-kubeconfig", "kubeconfig", "home"),
        "remote-2": kc.VkubeletDeployment("remote-2", identities.RELEASE_NAMESPACE, "custom", "config", "home"),
    }
    assert kc.webhook_scheduler_name(deployments) == "kube-offload-scheduler"


def test_errors_exit_2_with_a_message_and_no_traceback(tmp_path, capsys):
    code = cli.main(["status", "--kubeconfig", str(tmp_path / "missing.yaml")])
    err = capsys.readouterr().err
    assert code == plugin.EXIT_ERROR
    assert "kubectl offload status: --kubeconfig" in err and "does not exist" in err and "Traceback" not in err
    code = cli.main(["explain", "--kubeconfig", str(tmp_path / "missing.yaml")])
    assert code == plugin.EXIT_ERROR and "explain what?" in capsys.readouterr().err


def test_a_consumer_identity_is_recognised_by_name():
    assert kc.local_id_from_username(f"system:serviceaccount:{c.tenant_namespace('x')}:{c.CONSUMER_SERVICE_ACCOUNT}") == "x"
