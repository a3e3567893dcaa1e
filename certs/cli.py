"""``kube-offload certs``: generate, store, register and renew certificates.

Only flag parsing, error wording and printing live here; the work is in ``directory``,
``tls_secret`` and ``webhook_ca``. Every mistake the user can fix (an unreadable file, a
missing name, a bad address) ends as one line naming the flag and the fix, exit code 2;
API failures print one line and exit 1.

One module although over 400 lines: it is the whole surface of one command (four
actions, each a flag block and a short runner), and the wording of its errors is shared
by all four; split by action, each piece would import the others' helpers.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from kube_offload.runtime.flags import add_flag, appended, non_negative_int
from kube_offload.times import parse_duration

from . import directory as certdir
from . import pki

if TYPE_CHECKING:
    from kubernetes import client

    from kube_offload.runtime.kube import ApiError

COMPONENT = "certs"
DEFAULT_OUT_DIR = "kube-offload-certs"
DEFAULT_NAMESPACE = "kube-offload"
DEFAULT_SECRET_NAME = "kube-offload-tls"
DEFAULT_CA_SECRET_NAME = "kube-offload-ca"
DEFAULT_WITHIN = "720h"

EXIT_USAGE = 2
EXIT_API = 1


class UsageError(Exception):
    """One line for the user: what is wrong with which flag and how to fix it."""


# --- flag value types --------------------------------------------------------------------

def parse_timedelta(text: str) -> dt.timedelta:
    """``720h``, ``30d``, ``1h30m``, ``90s`` -> timedelta. A unit is required: a bare
    number would be ambiguous between the Go-style hours people write and seconds."""
    try:
        seconds = parse_duration(str(text).lower(), unit_required=True)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration; use a number with a unit d, h, m or s, e.g. 720h or 30d"
        ) from None
    return dt.timedelta(seconds=seconds)


def _listed(args: argparse.Namespace, flag: str) -> list[str]:
    """An append flag's values; each may also be comma-separated like its env variable."""
    return [item.strip() for value in appended(args, flag) for item in value.split(",") if item.strip()]


# --- registration ------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "certs",
        help="generate, store, register and renew TLS certificates",
        description=(
            "CA and serving certificates for the webhook, extender and kubelet endpoints. "
            "Files are named like the keys of a kubernetes.io/tls Secret: ca.crt, ca.key, "
            "tls.crt, tls.key. See docs/certificates.md."
        ),
    )
    parser.set_defaults(func=run, certs_action=None, certs_parser=parser)
    actions = parser.add_subparsers(dest="certs_command", metavar="ACTION")
    _register_generate(actions)
    _register_secret(actions)
    _register_patch_ca_bundle(actions)
    _register_renew(actions)


def _add_names(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, COMPONENT, "--dns", default=None, action="append",
             help="DNS name for the certificate's subjectAltName, repeatable "
                  "(e.g. kube-offload-webhook.kube-offload.svc)")
    add_flag(parser, COMPONENT, "--ip", default=None, action="append",
             help="IP address for the certificate's subjectAltName, repeatable (e.g. 127.0.0.1)")


def _add_kubeconfig(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, COMPONENT, "--kubeconfig", default=None,
             help="kubeconfig file; unset: in-cluster service account, else $KUBECONFIG or ~/.kube/config")


def _register_generate(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = actions.add_parser(
        "generate",
        help="write a CA and a serving certificate into a directory",
        description="Write ca.crt, ca.key, tls.crt and tls.key into --out-dir. An existing "
                    "CA in --out-dir (or the one in --ca-dir) is reused so registered "
                    "caBundles stay valid.",
    )
    add_flag(parser, COMPONENT, "--out-dir", default=DEFAULT_OUT_DIR,
             help="directory to write the files into (created if missing)")
    _add_names(parser)
    add_flag(parser, COMPONENT, "--ca-dir", default=None,
             help="directory holding ca.crt and ca.key of an existing CA to sign with; "
                  "unset: the CA in --out-dir, or a new one")
    add_flag(parser, COMPONENT, "--new-ca", type=bool, default=False,
             help="true: generate a new CA even if --out-dir has one (registered caBundles must be patched again)")
    add_flag(parser, COMPONENT, "--days", type=non_negative_int, default=pki.DEFAULT_SERVING_DAYS,
             help="validity of the serving certificate in days")
    add_flag(parser, COMPONENT, "--ca-days", type=non_negative_int, default=pki.DEFAULT_CA_DAYS,
             help="validity of a newly generated CA in days")
    add_flag(parser, COMPONENT, "--ca-common-name", default=pki.DEFAULT_CA_COMMON_NAME,
             help="common name of a newly generated CA")
    parser.set_defaults(certs_action=run_generate)


def _register_secret(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = actions.add_parser(
        "secret",
        help="create or update the kubernetes.io/tls Secret (and the CA Secret) in a cluster",
        description="Without --from-dir: keep a CA in Secret --ca-name (created once, never "
                    "overwritten) and a serving pair in Secret --name, reissued only when "
                    "missing, expiring within --within, lacking a requested name or signed by "
                    "another CA. With --from-dir: upload tls.crt, tls.key and ca.crt from a "
                    "directory written by `certs generate`.",
    )
    add_flag(parser, COMPONENT, "--namespace", default=DEFAULT_NAMESPACE,
             help="namespace of the Secrets")
    add_flag(parser, COMPONENT, "--name", default=DEFAULT_SECRET_NAME,
             help="name of the kubernetes.io/tls Secret (keys tls.crt, tls.key, ca.crt)")
    add_flag(parser, COMPONENT, "--ca-name", default=DEFAULT_CA_SECRET_NAME,
             help="name of the Opaque Secret holding the CA (keys ca.crt, ca.key)")
    add_flag(parser, COMPONENT, "--from-dir", default=None,
             help="upload this directory's tls.crt, tls.key and ca.crt instead of issuing in-cluster")
    add_flag(parser, COMPONENT, "--service", default=None, action="append",
             help="Service in --namespace to cover, repeatable: adds <svc>, <svc>.<ns>, "
                  "<svc>.<ns>.svc and <svc>.<ns>.svc.<cluster domain>")
    add_flag(parser, COMPONENT, "--cluster-domain", default="cluster.local",
             help="the cluster's DNS domain, for --service names")
    _add_names(parser)
    add_flag(parser, COMPONENT, "--days", type=non_negative_int, default=pki.DEFAULT_SERVING_DAYS,
             help="validity of a newly issued serving certificate in days")
    add_flag(parser, COMPONENT, "--ca-days", type=non_negative_int, default=pki.DEFAULT_CA_DAYS,
             help="validity of a newly generated CA in days")
    add_flag(parser, COMPONENT, "--within", type=parse_timedelta, default=DEFAULT_WITHIN,
             help="reissue the serving certificate when it expires within this duration (e.g. 720h, 30d)")
    _add_kubeconfig(parser)
    parser.set_defaults(certs_action=run_secret)


def _register_patch_ca_bundle(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = actions.add_parser(
        "patch-ca-bundle",
        help="set caBundle on every webhook of named webhook configurations",
        description="Set clientConfig.caBundle (base64 of --ca-file) on every webhook entry of "
                    "the named MutatingWebhookConfigurations and ValidatingWebhookConfigurations. "
                    "All names are checked before anything is patched.",
    )
    add_flag(parser, COMPONENT, "--mutating", default=None, action="append",
             help="MutatingWebhookConfiguration name, repeatable")
    add_flag(parser, COMPONENT, "--validating", default=None, action="append",
             help="ValidatingWebhookConfiguration name, repeatable")
    add_flag(parser, COMPONENT, "--ca-file", default=None,
             help="PEM file of the CA that signed the webhook's serving certificate (ca.crt)")
    _add_kubeconfig(parser)
    parser.set_defaults(certs_action=run_patch_ca_bundle)


def _register_renew(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = actions.add_parser(
        "renew",
        help="reissue a directory's serving certificate if it expires soon",
        description="Reissue tls.crt/tls.key in --dir with the same names and the same CA when "
                    "the certificate expires within --within (or no longer chains to the CA); "
                    "otherwise change nothing. Files are replaced atomically. Servers reading "
                    "the files per connection (gunicorn sync/gthread workers) pick the new pair "
                    "up at once; --reload-pid-file sends SIGHUP for the others.",
    )
    add_flag(parser, COMPONENT, "--dir", default=DEFAULT_OUT_DIR,
             help="directory holding tls.crt and tls.key (and ca.crt)")
    add_flag(parser, COMPONENT, "--ca-dir", default=None,
             help="directory holding ca.crt and ca.key; unset: --dir")
    add_flag(parser, COMPONENT, "--within", type=parse_timedelta, default=DEFAULT_WITHIN,
             help="renew when the certificate expires within this duration (e.g. 720h, 30d)")
    add_flag(parser, COMPONENT, "--days", type=non_negative_int, default=0,
             help="validity of the renewed certificate in days; 0 keeps the current certificate's lifetime")
    add_flag(parser, COMPONENT, "--reload-pid-file", default=None,
             help="after a renewal, send SIGHUP to the process whose pid this file holds "
                  "(gunicorn --pid FILE), so every worker reloads the new pair")
    parser.set_defaults(certs_action=run_renew)


# --- running -----------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    action: Callable[[argparse.Namespace], int] | None = args.certs_action
    if action is None:
        args.certs_parser.print_help()
        return EXIT_USAGE
    prog = f"kube-offload certs {args.certs_command}"
    try:
        return action(args)
    except UsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except _api_error_type() as exc:
        if exc.status == 0:
            print(f"{prog}: error: cannot reach the API server ({exc.message}); check --kubeconfig", file=sys.stderr)
        else:
            print(f"{prog}: error: the API server refused: {exc}", file=sys.stderr)
        return EXIT_API


def _api_error_type() -> type[ApiError] | type[_NeverRaised]:
    """kube_offload.runtime.kube.ApiError without importing the client for file-only commands."""
    module = sys.modules.get("kube_offload.runtime.kube")
    return module.ApiError if module is not None else _NeverRaised


class _NeverRaised(Exception):
    # What the handler reads of an ApiError, for the type checker: never raised.
    status: int
    message: str


def _names(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    dns = _listed(args, "--dns")
    ips = _listed(args, "--ip")
    for name in dns:
        try:
            pki.validate_dns_name(name)
        except ValueError as exc:
            raise UsageError(f"--dns {name}: {exc}") from None
    for ip in ips:
        try:
            pki.parse_ip_address(ip)
        except ValueError as exc:
            raise UsageError(f"--ip {ip}: {exc}") from None
    return dns, ips


def _files_error(exc: certdir.CertificateFilesError, flags: dict[str, str], fix: dict[str, str]) -> UsageError:
    return UsageError(f"{flags[exc.which]} {exc.directory}: {exc.problem}; {fix[exc.which]}")


def run_generate(args: argparse.Namespace) -> int:
    dns, ips = _names(args)
    if not dns and not ips:
        raise UsageError("no names: pass --dns NAME and/or --ip ADDRESS for the certificate's subjectAltName")
    out_dir = Path(args.out_dir)
    ca_dir = Path(args.ca_dir) if args.ca_dir else None
    try:
        result = certdir.generate_directory(
            out_dir,
            dns_names=dns,
            ip_addresses=ips,
            days=_at_least_one_day(args.days, "--days"),
            ca_dir=ca_dir,
            new_ca=args.new_ca,
            ca_days=_at_least_one_day(args.ca_days, "--ca-days"),
            ca_common_name=args.ca_common_name,
        )
    except certdir.CertificateFilesError as exc:
        flag = "--ca-dir" if ca_dir else "--out-dir"
        fix = ("point --ca-dir at a directory with ca.crt and ca.key" if ca_dir
               else "fix or remove ca.crt/ca.key there, or pass --new-ca true")
        raise _files_error(exc, {"ca": flag, "serving": "--out-dir"}, {"ca": fix, "serving": fix}) from None
    except OSError as exc:
        raise UsageError(f"--out-dir {out_dir}: cannot write {exc.filename or out_dir}: {exc.strerror}; "
                         "choose a writable directory") from None
    if result.ca_reused:
        print(f"CA: reused {result.ca_dir / 'ca.crt'} (pass --new-ca true for a new one)")
    else:
        print(f"CA: generated {result.ca_file} and {out_dir / 'ca.key'}")
    names = ", ".join([f"DNS:{n}" for n in dns] + [f"IP:{i}" for i in ips])
    not_after = result.serving.certificate.not_valid_after_utc.isoformat()
    print(f"serving certificate: {result.cert_file} + {result.key_file} for {names}, valid until {not_after}")
    print(f"caBundle: the base64 of {result.ca_file} (kube-offload certs patch-ca-bundle --ca-file {result.ca_file} ...)")
    return 0


def _at_least_one_day(days: int, flag: str) -> int:
    if days < 1:
        raise UsageError(f"{flag} {days}: a certificate must be valid for at least 1 day")
    return days


def _api_client(args: argparse.Namespace) -> client.ApiClient:
    """A client from kube_offload.runtime.kube, with the usual failure turned into a usage line."""
    if args.kubeconfig and not os.path.isfile(args.kubeconfig):
        raise UsageError(f"--kubeconfig {args.kubeconfig}: no such file; pass a readable kubeconfig "
                         "or leave it unset inside a pod")
    from kubernetes.config.config_exception import ConfigException

    from kube_offload.runtime.kube import load_api_client

    try:
        return load_api_client(args.kubeconfig)
    except ConfigException as exc:
        raise UsageError(f"--kubeconfig: no usable cluster configuration ({exc}); pass --kubeconfig FILE, "
                         "set KUBECONFIG, or run inside a pod") from None


def run_secret(args: argparse.Namespace) -> int:
    from . import tls_secret

    if args.from_dir:
        api_client = _api_client(args)
        try:
            action = tls_secret.upload_tls_secret(
                api_client, namespace=args.namespace, name=args.name, directory=Path(args.from_dir)
            )
        except certdir.CertificateFilesError as exc:
            raise UsageError(f"--from-dir {exc.directory}: {exc.problem}; "
                             "point it at a directory written by `kube-offload certs generate`") from None
        except ValueError as exc:  # the Secret exists with another type
            raise UsageError(f"--name {args.name}: {exc}") from None
        print(f"Secret {args.namespace}/{args.name} {action} from {args.from_dir}")
        return 0
    explicit_dns, ips = _names(args)
    # Service names first: the first name also becomes the certificate's common name.
    dns: list[str] = []
    for service in _listed(args, "--service"):
        try:
            dns += pki.service_dns_names(pki.validate_dns_name(service), args.namespace, args.cluster_domain)
        except ValueError as exc:
            raise UsageError(f"--service {service}: {exc}") from None
    dns += explicit_dns
    if not dns and not ips:
        raise UsageError("no names: pass --service SVC, --dns NAME and/or --ip ADDRESS "
                         "(or --from-dir DIR to upload existing files)")
    api_client = _api_client(args)
    try:
        outcome = tls_secret.ensure_tls_secret(
            api_client,
            namespace=args.namespace,
            name=args.name,
            ca_name=args.ca_name,
            dns_names=dns,
            ip_addresses=ips,
            days=_at_least_one_day(args.days, "--days"),
            ca_days=_at_least_one_day(args.ca_days, "--ca-days"),
            within=args.within,
        )
    except tls_secret.UnusableCaSecret as exc:
        raise UsageError(f"--ca-name {args.ca_name}: {exc}") from None
    except ValueError as exc:
        raise UsageError(f"--name {args.name}: {exc}") from None
    for line in outcome.describe():
        print(line)
    return 0


def run_patch_ca_bundle(args: argparse.Namespace) -> int:
    from . import webhook_ca

    mutating = _listed(args, "--mutating")
    validating = _listed(args, "--validating")
    if not mutating and not validating:
        raise UsageError("nothing to patch: pass --mutating NAME and/or --validating NAME")
    if not args.ca_file:
        raise UsageError("--ca-file is required: the ca.crt written by `kube-offload certs generate`")
    try:
        ca_b64 = pki.ca_bundle_b64(Path(args.ca_file).read_bytes())
    except OSError as exc:
        raise UsageError(f"--ca-file {args.ca_file}: cannot read it: {exc.strerror}; pass the CA's ca.crt") from None
    except ValueError as exc:
        raise UsageError(f"--ca-file {args.ca_file}: {exc}; pass the CA's ca.crt, not a key or a serving certificate") from None
    api_client = _api_client(args)
    try:
        outcomes = webhook_ca.patch_ca_bundle(
            api_client, mutating=mutating, validating=validating, ca_b64=ca_b64
        )
    except webhook_ca.WebhookConfigurationNotFound as exc:
        raise UsageError(str(exc)) from None
    for outcome in outcomes:
        print(outcome.describe())
    return 0


def run_renew(args: argparse.Namespace) -> int:
    directory = Path(args.dir)
    ca_dir = Path(args.ca_dir) if args.ca_dir else None
    try:
        outcome = certdir.renew_directory(
            directory, ca_dir=ca_dir, within=args.within, days=args.days or None
        )
    except certdir.CertificateFilesError as exc:
        flags = {"ca": "--ca-dir" if ca_dir else "--dir", "serving": "--dir"}
        fixes = {
            "ca": "the CA that signed the certificate must be there as ca.crt + ca.key",
            "serving": "run `kube-offload certs generate --out-dir` for it first",
        }
        raise _files_error(exc, flags, fixes) from None
    except OSError as exc:
        raise UsageError(f"--dir {directory}: cannot write {exc.filename or directory}: {exc.strerror}") from None
    except ValueError as exc:
        raise UsageError(f"--dir {directory}: cannot reissue the certificate: {exc}") from None
    print(outcome.describe())
    now = dt.datetime.now(dt.timezone.utc)
    if outcome.ca_not_after - now <= args.within:
        print(
            f"warning: the CA expires at {outcome.ca_not_after.isoformat()}; renewing cannot go past it. "
            "Generate a new CA (certs generate --new-ca true) and patch the caBundle again.",
            file=sys.stderr,
        )
    if outcome.renewed and args.reload_pid_file:
        pid = _signal_reload(args.reload_pid_file)
        print(f"sent SIGHUP to pid {pid} from {args.reload_pid_file}")
    return 0


def _signal_reload(pid_file: str) -> int:
    try:
        pid = int(Path(pid_file).read_text().strip())
    except OSError as exc:
        raise UsageError(f"--reload-pid-file {pid_file}: cannot read it: {exc.strerror}; the certificate WAS "
                         "renewed, reload the server yourself (kill -HUP <gunicorn master pid>)") from None
    except ValueError:
        raise UsageError(f"--reload-pid-file {pid_file}: does not hold a pid; the certificate WAS renewed, "
                         "reload the server yourself (kill -HUP <gunicorn master pid>)") from None
    try:
        os.kill(pid, signal.SIGHUP)
    except OSError as exc:
        raise UsageError(f"--reload-pid-file {pid_file}: cannot signal pid {pid}: {exc.strerror}; the "
                         "certificate WAS renewed, reload the server yourself") from None
    return pid
