"""The stand-in images' recipe and assembly, without Debian's archive: dependency
closure, paths merged into /usr, what a layer keeps and adds, and the layout of every
image (the real-node tier pulls them through containerd and runs users' commands:
tests/realnode/test_standin_images.py)."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from kube_offload_harness import debian_packages as deb
from kube_offload_harness import oci_image, standin_images
from kube_offload_harness import standin_recipe as recipe
from kube_offload_harness.debian_packages import DebianPackageError, File, Package


def _package(name: str, depends: str = "", provides: str = "") -> Package:
    return Package(name, "1.0", deb.parse_relations(depends), tuple(g[0] for g in deb.parse_relations(provides)), Path(f"/{name}.deb"))


def _index(*packages: Package) -> dict[str, Package]:
    return {package.name: package for package in packages}


def _layer(name: str) -> recipe.LayerRecipe:
    return next(layer for layer in recipe.LAYERS if layer.name == name)


# --- Debian packages ---------------------------------------------------------------------------------
@pytest.mark.parametrize("field, expected", [
    ("", ()),
    ("libc6 (>= 2.34)", (("libc6",),)),
    ("libc6 (>= 2.34), debconf (>= 0.5) | debconf-2.0", (("libc6",), ("debconf", "debconf-2.0"))),
    ("python3:any, libfoo [amd64]", (("python3",), ("libfoo",))),
    ("nginx-common (<< 1.22.1-9.1~), nginx-common (>= 1.22.1-9)", (("nginx-common",), ("nginx-common",))),
])
def test_relations_are_parsed_to_names_without_versions_or_qualifiers(field, expected):
    assert deb.parse_relations(field) == expected


def test_closure_follows_depends_and_virtual_packages_and_leaves_out_what_is_skipped():
    index = _index(
        _package("python3", "python3.11, media-types | mime-support"),
        _package("python3.11", "libc6, dpkg (>= 1.13)"),
        _package("media-types"),
        _package("libc6", "libgcc-s1"),
        _package("libgcc-s1", "libc6"),  # a cycle
        _package("awk-provider", provides="awk"),
        _package("needs-awk", "awk"),
        _package("asks", "debconf (>= 0.5) | debconf-2.0"),
    )
    assert deb.closure(("python3",), index, {"dpkg": "never runs"}) == {"python3", "python3.11", "media-types", "libc6", "libgcc-s1"}
    assert deb.closure(("needs-awk",), index, {}) == {"needs-awk", "awk-provider"}
    assert deb.closure(("asks",), index, {"debconf": "nothing installed"}) == {"asks"}


def test_a_dependency_that_was_not_downloaded_names_the_package_and_the_fix():
    with pytest.raises(DebianPackageError, match="python3.11 needs libmissing, which was not downloaded.*skip list"):
        deb.closure(("python3.11",), _index(_package("python3.11", "libmissing")), {})


@pytest.mark.parametrize("path, expected", [
    ("./bin/bash", "usr/bin/bash"),
    ("./lib64/ld-linux-x86-64.so.2", "usr/lib64/ld-linux-x86-64.so.2"),
    ("./lib/x86_64-linux-gnu/libc.so.6", "usr/lib/x86_64-linux-gnu/libc.so.6"),
    ("./sbin/", "usr/sbin"),
    ("./usr/bin/python3.11", "usr/bin/python3.11"),
    ("./library/file", "library/file"),
    ("./binaries", "binaries"),
    ("./", ""),
])
def test_package_paths_are_merged_into_usr(path, expected):
    assert deb.merged_usr_path(path) == expected


@pytest.mark.parametrize("path, target, expected", [
    ("./bin/x", "../usr/bin/y", "/usr/bin/y"),  # would be /usr/usr/bin/y from /usr/bin
    ("./bin/sh", "dash", "/bin/dash"),
    ("./lib64/ld.so", "/lib/x86_64-linux-gnu/ld.so", "/lib/x86_64-linux-gnu/ld.so"),
    ("./usr/bin/python3", "python3.11", "python3.11"),  # did not move: unchanged
])
def test_links_moved_into_usr_keep_pointing_where_they_did(path, target, expected):
    assert deb.symlink_target(path, target) == expected


# --- the recipe ---------------------------------------------------------------------------------------
def test_the_recipe_stacks_every_layer_on_what_it_declares_and_names_each_image_once():
    recipe.check_recipe()
    names = [name for standin in recipe.STANDINS for name in standin.full_names]
    assert all(name.startswith("docker.io/library/") for name in names)
    assert {recipe.BUSYBOX_IMAGE, recipe.PYTHON_IMAGE, "docker.io/library/busybox:latest", "docker.io/library/alpine:3.19",
            "docker.io/library/python:alpine", "docker.io/library/nginx:alpine", "docker.io/library/nginx:latest",
            "docker.io/library/debian:bookworm", "docker.io/library/ubuntu:22.04"} <= set(names)


def test_a_recipe_whose_layer_lacks_its_base_is_refused():
    pip_on_bare_glibc = recipe.StandIn(("x:1",), "x", ("glibc", "pip"), oci_image.ImageConfig())
    with pytest.raises(ValueError, match="layer 'pip' must sit on python"):
        recipe.check_recipe(standins=[pip_on_bare_glibc])
    with pytest.raises(ValueError, match="no layer 'nope'"):
        recipe.check_recipe(standins=[recipe.StandIn(("x:1",), "x", ("nope",), oci_image.ImageConfig())])
    twice = recipe.StandIn(("busybox:1.36",), "x", ("glibc",), oci_image.ImageConfig())
    with pytest.raises(ValueError, match="named by two stand-ins"):
        recipe.check_recipe(standins=[*recipe.STANDINS, twice])


def test_each_layer_takes_its_closure_less_the_layers_beneath():
    index = _index(_package("libc6"), _package("netbase"), _package("busybox", "libc6"), _package("bash", "libc6, libtinfo6"),
                   _package("libtinfo6", "libc6"), *[_package(name, "libc6") for name in _layer("debian").packages if name != "bash"],
                   _package("python3", "libc6, libtinfo6, dpkg"), _package("python-is-python3", "python3"),
                   _package("python3-pip", "python3:any, ca-certificates"), _package("python3.11-venv", "python3"),
                   _package("ca-certificates", "openssl (>= 1.1.1), debconf (>= 0.5) | debconf-2.0"),
                   _package("nginx", "libc6, iproute2"))
    layers = standin_images.layer_packages(index)
    assert layers["glibc"] == ["libc6", "netbase"]
    assert layers["busybox"] == ["busybox"]  # libc6 is the glibc layer's
    assert layers["python"] == ["libtinfo6", "python-is-python3", "python3"]  # also in debian's: python sits on glibc only
    assert layers["pip"] == ["ca-certificates", "python3-pip", "python3.11-venv"]  # python3 is the python layer's; openssl skipped
    assert layers["nginx"] == ["nginx"]  # iproute2 skipped
    assert layers["alpine"] == []


@pytest.mark.parametrize("path, kind, kept", [
    ("usr/bin/bash", "file", True),
    ("usr/share/doc/bash", "dir", True),
    ("usr/share/doc/bash/copyright", "file", True),
    ("usr/share/doc/bash/README.gz", "file", False),
    ("usr/share/man/man1/bash.1.gz", "file", False),
    ("usr/share/man", "dir", False),
    ("usr/share/locale/de/LC_MESSAGES/bash.mo", "file", False),
    ("usr/lib/x86_64-linux-gnu/gconv/ISO8859-1.so", "file", False),
    ("usr/lib/locale/C.utf8/LC_CTYPE", "file", True),
    ("etc/init.d/nginx", "file", False),
])
def test_what_a_layer_keeps_of_its_packages(path, kind, kept):
    assert recipe.kept(path, kind) is kept


def test_a_layer_drops_its_own_paths_and_extras_replace_package_files():
    layer = recipe.LayerRecipe("nginx", "x", drop=("etc/nginx/sites-enabled/",))
    files = [File("etc/nginx", "dir", 0o755, 0, 0), File("etc/nginx", "dir", 0o755, 0, 0),
             File("etc/nginx/nginx.conf", "file", 0o100644, 0, 0, data=b"debian's"),
             File("etc/nginx/sites-enabled/default", "symlink", 0o777, 0, 0, target="/x"),
             File("var/www", "dir", 0o755, 33, 33)]
    entries = {e.path: e for e in recipe.layer_entries(layer, files, [oci_image.Entry("etc/nginx/nginx.conf", data=b"ours")])}
    assert set(entries) == {"etc/nginx", "etc/nginx/nginx.conf", "var/www"}
    assert entries["etc/nginx/nginx.conf"].data == b"ours"
    assert (entries["var/www"].uid, entries["var/www"].gid, entries["etc/nginx"].mode) == (33, 33, 0o755)


def test_two_packages_shipping_one_path_differently_is_an_error():
    files = [File("usr/bin/x", "file", 0o755, 0, 0, data=b"a"), File("usr/bin/x", "file", 0o755, 0, 0, data=b"b")]
    with pytest.raises(ValueError, match="two packages ship usr/bin/x differently"):
        recipe.layer_entries(recipe.LayerRecipe("l", "x"), files, [])


# --- what each layer adds ---------------------------------------------------------------------------------
def test_the_glibc_layer_merges_usr_and_resolves_hosts_from_files_then_dns():
    entries = {e.path: e for e in recipe.extra_entries("glibc", recipe.Context())}
    assert {top: entries[top].target for top in ("bin", "sbin", "lib", "lib64")} == {
        "bin": "usr/bin", "sbin": "usr/sbin", "lib": "usr/lib", "lib64": "usr/lib64"}
    assert "hosts: files dns" in entries["etc/nsswitch.conf"].data.decode()
    assert (entries["tmp"].mode, entries["root"].mode) == (0o1777, 0o700)
    passwd = entries["etc/passwd"].data.decode()
    assert passwd.startswith("root:x:0:0:") and "nginx:x:101:101:" in passwd and "nobody:x:65534:65534:" in passwd


def test_busybox_applets_are_links_to_busybox_where_list_full_puts_them():
    applets = ("bin/sh", "usr/bin/wget", "sbin/ifconfig", "bin/busybox", "linuxrc", "usr/bin/nslookup")
    entries = {e.path: e for e in recipe.extra_entries("busybox", recipe.Context(applets=applets))}
    assert set(entries) == {"usr/bin/sh", "usr/bin/wget", "usr/sbin/ifconfig", "usr/bin/nslookup"}
    links = {path: e for path, e in entries.items() if path != "usr/bin/wget"}
    assert {e.kind for e in links.values()} == {"symlink"} and {e.target for e in links.values()} == {"/usr/bin/busybox"}
    # wget is the script that gives Debian's busybox wget the original's -T/--timeout
    wget = entries["usr/bin/wget"]
    assert wget.kind == "file" and wget.mode == 0o755 and wget.data == recipe.WGET.encode()
    assert wget.data.startswith(b"#!/usr/bin/busybox sh\n") and b"busybox timeout" in wget.data
    with pytest.raises(ValueError, match="no sh or wget"):
        recipe.extra_entries("busybox", recipe.Context(applets=("bin/ls",)))


def test_the_alpine_layer_says_what_it_is_and_its_apk_says_it_cannot_install():
    entries = {e.path: e for e in recipe.extra_entries("alpine", recipe.Context())}
    os_release = dict(line.split("=", 1) for line in entries["etc/os-release"].data.decode().splitlines())
    assert os_release["ID"] == "alpine" and os_release["VERSION_ID"] == recipe.ALPINE_VERSION
    assert "kube-offload stand-in" in os_release["PRETTY_NAME"] and os_release["VARIANT_ID"] == "kube-offload-standin"
    apk = entries["usr/sbin/apk"]
    assert apk.mode == 0o755 and apk.data.startswith(b"#!/bin/sh\n") and b"exit 1" in apk.data


def test_the_debian_layer_writes_what_its_maintainer_scripts_would_have():
    templates = {path: File(path, "file", 0o644, 0, 0, data=path.encode()) for path in (
        "usr/share/base-files/profile", "usr/share/base-files/dot.bashrc", "usr/share/base-files/dot.profile",
        "usr/share/debianutils/shells")}
    entries = {e.path: e for e in recipe.extra_entries("debian", recipe.Context(files=templates))}
    assert entries["etc/profile"].data == b"usr/share/base-files/profile"
    assert entries["root/.bashrc"].data == b"usr/share/base-files/dot.bashrc"
    assert (entries["usr/bin/awk"].target, entries["usr/bin/which"].target) == ("/usr/bin/mawk", "/usr/bin/which.debianutils")
    assert b"exit 100" in entries["usr/bin/apt-get"].data
    with pytest.raises(ValueError, match="no usr/share/base-files/profile"):
        recipe.extra_entries("debian", recipe.Context())


def test_the_pip_layer_writes_the_ca_bundle_debians_pip_reads():
    certificates = {f"usr/share/ca-certificates/mozilla/{name}.crt": File("x", "file", 0o644, 0, 0, data=f"-----{name}-----\n".encode())
                    for name in ("B", "A")}
    entries = {e.path: e for e in recipe.extra_entries("pip", recipe.Context(files=certificates))}
    assert entries["etc/ssl/certs/ca-certificates.crt"].data == b"-----A-----\n-----B-----\n"
    assert entries["usr/local/bin/pip"].target == "/usr/bin/pip3"
    with pytest.raises(ValueError, match="ca-certificates"):
        recipe.extra_entries("pip", recipe.Context())


def test_nginx_serves_its_default_page_on_80_and_logs_to_the_container_output():
    context = recipe.Context(files={"usr/share/nginx/html/index.html": File("usr/share/nginx/html/index.html", "file", 0o644, 0, 0)})
    entries = {e.path: e for e in recipe.extra_entries("nginx", context)}
    conf, site = entries["etc/nginx/nginx.conf"].data.decode(), entries["etc/nginx/conf.d/default.conf"].data.decode()
    assert "user nginx;" in conf and "include /etc/nginx/conf.d/*.conf;" in conf
    assert "listen 80;" in site and "root /usr/share/nginx/html;" in site
    assert (entries["var/log/nginx/access.log"].target, entries["var/log/nginx/error.log"].target) == ("/dev/stdout", "/dev/stderr")
    nginx = next(s for s in recipe.STANDINS if "nginx:alpine" in s.names).config
    assert (nginx.cmd, nginx.exposed_ports, nginx.stop_signal) == (["nginx", "-g", "daemon off;"], ["80/tcp"], "SIGQUIT")


# --- the layout ------------------------------------------------------------------------------------------
def _layers() -> dict[str, oci_image.Layer]:
    return {layer.name: oci_image.gzip_layer(oci_image.layer_tar([oci_image.Entry(f"{layer.name}.txt", data=layer.name.encode())]))
            for layer in recipe.LAYERS}


def test_the_layout_names_every_stand_in_and_keeps_each_layer_once():
    layers = _layers()
    files = standin_images.layout_files(layers, "k1")
    entries = json.loads(files["index.json"])["manifests"]
    assert [e["annotations"][oci_image.IMAGE_NAME_ANNOTATION] for e in entries] == [
        name for standin in recipe.STANDINS for name in standin.full_names]
    blobs = [path for path in files if path.startswith("blobs/")]
    assert len(blobs) == len(set(blobs)) and all(oci_image.blob_path(files[path]) == path for path in blobs)
    by_name = {e["annotations"][oci_image.IMAGE_NAME_ANNOTATION]: e["digest"] for e in entries}
    assert by_name["docker.io/library/busybox:1.36"] == by_name["docker.io/library/busybox:latest"]  # tags of one image
    manifest = json.loads(files[f"blobs/sha256/{by_name[recipe.PYTHON_IMAGE].split(':')[1]}"])
    assert [layer["digest"] for layer in manifest["layers"]] == [
        oci_image.sha256(layers[name].blob) for name in ("glibc", "debian", "python", "pip")]
    assert {layer["mediaType"] for layer in manifest["layers"]} == {oci_image.GZIP_LAYER_MEDIA_TYPE}
    config = json.loads(files[f"blobs/sha256/{manifest['config']['digest'].split(':')[1]}"])
    assert config["rootfs"]["diff_ids"] == [layers[name].diff_id for name in ("glibc", "debian", "python", "pip")]
    assert config["config"]["Cmd"] == ["python3"] and "LANG=C.UTF-8" in config["config"]["Env"]
    assert config["config"]["Labels"]["io.kube-offload.standin-recipe"] == "k1"
    assert standin_images.layout_files(layers, "k1") == files  # deterministic


def test_gzipped_layers_are_deterministic_and_name_their_uncompressed_digest():
    tar = oci_image.layer_tar([oci_image.Entry("a", data=b"a" * 1000)])
    layer = oci_image.gzip_layer(tar)
    assert layer == oci_image.gzip_layer(tar) and layer.diff_id == oci_image.sha256(tar) != oci_image.sha256(layer.blob)
    with tarfile.open(fileobj=io.BytesIO(layer.blob), mode="r:gz") as opened:
        assert opened.getnames() == ["a"]


def test_the_recipe_key_follows_every_source():
    assert standin_images.recipe_key([b"a", b"b"]) == standin_images.recipe_key([b"a", b"b"])
    assert standin_images.recipe_key([b"a", b"b"]) != standin_images.recipe_key([b"a", b"c"])
    assert standin_images.recipe_key([b"ab", b""]) != standin_images.recipe_key([b"a", b"b"])
    assert len(standin_images.current_key()) == 16


def test_a_cached_layout_is_used_without_building(tmp_path, monkeypatch):
    directory = tmp_path / f"standins-{standin_images.current_key()}"
    directory.mkdir()
    (directory / "index.json").write_text("{}")
    monkeypatch.delenv(standin_images.REFRESH, raising=False)
    monkeypatch.setattr(standin_images, "_build", lambda *args: pytest.fail("built although cached"))
    assert standin_images.build(print, root=tmp_path) == directory


def test_a_build_keeps_the_most_recently_used_other_builds(tmp_path, monkeypatch):
    import os

    for age, key in enumerate(["old1", "old2", "old3", "old4"]):
        (tmp_path / f"standins-{key}").mkdir()
        os.utime(tmp_path / f"standins-{key}", (1000 + age, 1000 + age))

    def build(work, key, say):
        layout = work / "layout"
        layout.mkdir()
        (layout / "index.json").write_text("{}")
        (layout / standin_images.SUMMARY).write_text("{}")
        return layout

    monkeypatch.setattr(standin_images, "_build", build)
    built = standin_images.build(lambda line: None, root=tmp_path)
    assert sorted(p.name for p in tmp_path.glob("standins-*")) == sorted([built.name, "standins-old3", "standins-old4"])
    assert json.loads((built / standin_images.SUMMARY).read_text())["built_seconds"] >= 0
    assert not list(tmp_path.glob(".standins-*"))  # the work directory is gone


@pytest.mark.parametrize("argv, expected", [
    (["-qO-", "http://a"], ["wget", "-qO-", "http://a"]),
    (["-q", "-T", "2", "-O-", "http://a"], ["timeout", "2", "wget", "-q", "-O-", "http://a"]),
    (["-T2", "http://a"], ["timeout", "2", "wget", "http://a"]),
    (["-qT", "3", "http://a"], ["timeout", "3", "wget", "-q", "http://a"]),
    (["-qT3", "-O-", "http://a"], ["timeout", "3", "wget", "-q", "-O-", "http://a"]),
    (["--spider", "--timeout=1", "http://a"], ["timeout", "1", "wget", "--spider", "http://a"]),
    (["--timeout", "4", "http://a"], ["timeout", "4", "wget", "http://a"]),
    # -O takes an argument: "-OT" is the file T, and a word that is an option's value stays
    (["-OT", "-U", "Tool", "http://a"], ["wget", "-OT", "-U", "Tool", "http://a"]),
])
def test_the_wget_script_takes_the_timeout_off_the_command_line(tmp_path, argv, expected):
    """The stand-in's wget, run by /bin/sh with a busybox that prints what it was asked to
    run: the timeout goes to busybox's `timeout`, every other word to wget unchanged."""
    busybox = tmp_path / "busybox"
    # timeout SECS busybox sh -c '...' wget ARGS... -> "timeout SECS wget ARGS"; wget ARGS -> "wget ARGS"
    busybox.write_text('#!/bin/sh\nif [ "$1" = timeout ]; then echo timeout "$2"; shift 6; fi\n'
                       'for word do echo "$word"; done\n')
    busybox.chmod(0o755)
    script = tmp_path / "wget"
    script.write_text(recipe.WGET.replace("/usr/bin/busybox", str(busybox)))
    done = subprocess.run(["/bin/sh", str(script), *argv], capture_output=True, text=True, timeout=10)
    assert done.returncode == 0, done.stderr
    words = done.stdout.split("\n")[:-1]
    if words[0].startswith("timeout "):
        words = words[0].split() + words[1:]
    assert words == expected


@pytest.mark.parametrize("argv, message", [(["-T"], "option requires an argument: T"),
                                           (["-T", "x", "http://a"], "invalid number 'x'")])
def test_the_wget_script_refuses_a_bad_timeout_as_busybox_does(tmp_path, argv, message):
    script = tmp_path / "wget"
    script.write_text(recipe.WGET)
    done = subprocess.run(["/bin/sh", str(script), *argv], capture_output=True, text=True, timeout=10)
    assert done.returncode == 1 and message in done.stderr
