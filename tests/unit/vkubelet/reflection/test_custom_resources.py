"""Custom resource reflection's pure parts: the flag, the object sent, the comparison,
the status written back and the fit to the provider's grant."""

from __future__ import annotations

import argparse

import pytest

from kube_offload import constants as c
from kube_offload import provider_policy as pp
from vkubelet.reflection import forge as f
from vkubelet.reflection.custom_resources import (
    field_manager,
    fit_grant,
    forge_custom_resource,
    is_up_to_date,
    project,
    status_back,
)
from vkubelet.reflection.flags import add_reflection_flags, reflection_settings_from_args
from vkubelet.shared.names import LABEL_REFLECTOR
from vkubelet.reflection.policy import Policy
from vkubelet.reflection.settings import CustomResource, ReflectionSettings, parse_custom_resource
from vkubelet.settings import SettingsError

WIDGETS = CustomResource(group="example.com", version="v1", plural="widgets", kind="Widget",
                         out=("spec.size", "spec.color"), back=("status.phase",))
CTX = f.ForgeContext(local_cluster_id="local", remote_namespace="demo-local", reflector=WIDGETS.key)


def widget(**spec: object) -> dict:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "demo", "uid": "u-1", "resourceVersion": "7",
                     "labels": {"app": "x"}, "finalizers": ["local.example.com/f"]},
        "spec": dict(spec),
        "status": {"phase": "Local", "other": 1},
    }


# --- the flag --------------------------------------------------------------------------------
def test_parse_a_full_flag():
    cr = parse_custom_resource("widgets.v1.example.com:Widget:out=spec.size;spec.color:back=status.phase:policy=allow-list:workers=3")
    assert cr == CustomResource(group="example.com", version="v1", plural="widgets", kind="Widget",
                                out=("spec.size", "spec.color"), back=("status.phase",), workers=3, policy=Policy.ALLOW_LIST)
    assert cr.key == "widgets.example.com"
    assert cr.api_kind.path(namespace="n", name="w", subresource="status") == "/apis/example.com/v1/namespaces/n/widgets/w/status"


def test_parse_defaults_send_the_spec_and_bring_the_status_back():
    cr = parse_custom_resource("databases.v1beta1.db.example.org:Database")
    assert (cr.group, cr.version, cr.plural, cr.out, cr.back) == ("db.example.org", "v1beta1", "databases", ("spec",), ("status",))


@pytest.mark.parametrize(
    "item, words",
    [
        ("widgets", "PLURAL.VERSION.GROUP:KIND"),
        ("widgets.example.com:Widget", "is not PLURAL.VERSION.GROUP"),
        ("widgets.v1.example.com:widget", "is not a kind"),
        ("shadowpods.v1alpha1.kube-offload.io:ShadowPod", "kube-offload's own"),
        ("deployments.v1.apps.k8s.io:Deployment", "Kubernetes'"),
        ("widgets.v1.example.com:Widget:out=metadata.labels", "must be under spec"),
        ("widgets.v1.example.com:Widget:out=status.phase", "must be under spec"),
        ("widgets.v1.example.com:Widget:back=spec.size", "must be under status"),
        ("widgets.v1.example.com:Widget:out=spec..x", "not a dotted field path"),
        ("widgets.v1.example.com:Widget:color=red", "not one of out=, back="),
        ("widgets.v1.example.com:Widget:policy=by-use", "deny-list or allow-list"),
        ("widgets.v1.example.com:Widget:workers=0", "workers=0"),
    ],
)
def test_parse_refuses_naming_the_flag(item, words):
    with pytest.raises(ValueError) as error:
        parse_custom_resource(item)
    assert "--reflect-custom-resource" in str(error.value) and words in str(error.value)


def test_the_flag_reaches_the_settings_and_a_bad_one_is_a_settings_error():
    parser = argparse.ArgumentParser()
    add_reflection_flags(parser, "vkubelet")
    settings = reflection_settings_from_args(parser.parse_args(["--reflect-custom-resource", "widgets.v1.example.com:Widget"]))
    assert [cr.key for cr in settings.custom_resources] == ["widgets.example.com"]
    assert settings.of("widgets.example.com").workers == 2
    assert settings.problem() is None
    with pytest.raises(SettingsError, match="reflect-custom-resource"):
        reflection_settings_from_args(parser.parse_args(["--reflect-custom-resource", "widgets:Widget"]))


def test_a_kind_given_twice_is_a_problem():
    twice = ReflectionSettings(custom_resources=(WIDGETS, WIDGETS))
    assert "widgets.example.com given more than once" in (twice.problem() or "")


def test_an_unknown_resource_is_still_refused():
    with pytest.raises(KeyError):
        ReflectionSettings().of("gadgets.example.com")


# --- out -------------------------------------------------------------------------------------
def test_only_the_out_paths_go_out_with_reflections_metadata():
    local = widget(size=3, color="red", secret="no")
    sent = forge_custom_resource(local, CTX, WIDGETS)
    assert sent["apiVersion"] == "example.com/v1" and sent["kind"] == "Widget"
    assert sent["spec"] == {"size": 3, "color": "red"}
    assert "status" not in sent
    meta = sent["metadata"]
    assert meta["namespace"] == "demo-local" and meta["name"] == "w"
    assert meta["labels"] == {"app": "x", c.LABEL_ORIGIN_CLUSTER_ID: "local", LABEL_REFLECTOR: "widgets.example.com"}
    assert meta["annotations"] == {c.ANNOTATION_ORIGIN_NAMESPACE: "demo", c.ANNOTATION_ORIGIN_NAME: "w"}
    assert not {"uid", "resourceVersion", "finalizers"} & set(meta)


def test_a_path_the_local_object_lacks_is_not_sent():
    assert forge_custom_resource(widget(size=3), CTX, WIDGETS)["spec"] == {"size": 3}
    assert "spec" not in forge_custom_resource(widget(), CTX, WIDGETS)


def test_project_copies_deeply():
    obj = {"spec": {"nested": {"a": [1]}}}
    out = project(obj, ("spec.nested",))
    out["spec"]["nested"]["a"].append(2)
    assert obj["spec"]["nested"]["a"] == [1]


def test_up_to_date_compares_the_out_paths_and_metadata_only():
    desired = forge_custom_resource(widget(size=3, color="red"), CTX, WIDGETS)
    current = {**desired, "spec": {**desired["spec"], "defaulted": True}, "status": {"phase": "Ready"}}
    assert is_up_to_date(desired, current, WIDGETS)
    assert not is_up_to_date(desired, {**current, "spec": {"size": 4, "color": "red"}}, WIDGETS)
    # A path gone locally but still remote: not up to date (the apply drops it).
    smaller = forge_custom_resource(widget(size=3), CTX, WIDGETS)
    assert not is_up_to_date(smaller, current, WIDGETS)
    relabelled = {**current, "metadata": {**current["metadata"], "labels": {"app": "y"}}}
    assert not is_up_to_date(desired, relabelled, WIDGETS)


# --- back ------------------------------------------------------------------------------------
def test_status_back_brings_only_the_back_paths():
    local = widget(size=1)
    remote = {"status": {"phase": "Ready", "provider": "secret-ish"}}
    body = status_back(local, remote, WIDGETS)
    assert body == {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "demo"},
                    "status": {"phase": "Ready"}}


def test_status_back_nothing_when_equal_or_nothing_comes_back():
    local = widget()
    assert status_back(local, {"status": {"phase": "Local"}}, WIDGETS) is None
    no_back = CustomResource(group="example.com", version="v1", plural="widgets", kind="Widget", back=())
    assert status_back(local, {"status": {"phase": "Ready"}}, no_back) is None


def test_status_back_drops_a_path_the_remote_no_longer_has():
    # Applied with an empty status, the manager gives up status.phase: it disappears locally.
    body = status_back(widget(), {"status": {}}, WIDGETS)
    assert body is not None and body["status"] == {}


def test_field_manager_per_virtual_node():
    assert field_manager("kube-offload-remote-1") == "kube-offload/kube-offload-remote-1"


# --- the provider's grant --------------------------------------------------------------------
def grant(*fields: str) -> pp.ProviderPolicy:
    return pp.ProviderPolicy(custom_resources=(pp.CustomResourceGrant("example.com", "widgets", tuple(fields)),))


def test_a_kind_not_granted_is_refused_naming_the_key():
    fit = fit_grant(forge_custom_resource(widget(size=1), CTX, WIDGETS), WIDGETS, pp.DEFAULT_POLICY)
    assert [n.field for n in fit.refused] == ["kind"]
    assert "spec.policy.customResources: none" in fit.refused[0].message
    assert "Widget (widgets.example.com) is not granted" in fit.refused[0].message


def test_a_field_not_granted_is_refused_naming_it():
    fit = fit_grant(forge_custom_resource(widget(size=1, color="red"), CTX, WIDGETS), WIDGETS, grant("size"))
    assert [n.field for n in fit.refused] == ["spec.color"]
    assert "specFields: size" in fit.refused[0].message


def test_granted_fields_pass_untouched():
    desired = forge_custom_resource(widget(size=1, color="red"), CTX, WIDGETS)
    fit = fit_grant(desired, WIDGETS, grant("size", "color"))
    assert not fit.refused and not fit.adjusted and fit.obj == desired and fit.obj is not desired
