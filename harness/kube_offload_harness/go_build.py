"""Running the Go toolchain for the binary builder (binaries.py says what to build).

A build is a list of steps, each split in two: ``prepare`` writes its wrapper module
(go_wrapper.py) and downloads the modules it needs (network, little CPU) and ``compile``
runs ``go build``. The first step is prepared in the foreground; the others are prepared
one after the other by a background thread while the steps before them compile, so on a
cold machine the downloads hide behind the control plane's eight minutes of compiling.

A program marked ``shared`` is first built in the control plane's module graph (so it
reuses what the control plane compiled) and, when that graph does not load or compile it,
in its own graph, as released; the step's summary line says which.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from kube_offload_harness import go_wrapper, versions

Say = Callable[[str], None]

OWN_GRAPH = "its own module graph"
SHARED_GRAPH = "the control plane's module graph"


class BuildError(RuntimeError):
    """A build step failed; the message says which step and what to try."""


def parse_go_version(output: str) -> tuple[int, int] | None:
    match = re.search(r"go(\d+)\.(\d+)", output)
    return (int(match.group(1)), int(match.group(2))) if match else None


def compiled_packages(log: str) -> int:
    """How many packages a ``go build -v`` log says it compiled: one import path a line
    (packages found in the build cache are not printed; errors and ``go: downloading``
    lines are not import paths)."""
    return sum(1 for line in log.splitlines()
               if line and not line.startswith(("#", "go: ", " ", "\t")) and ":" not in line and " " not in line)


def go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(CGO_ENABLED="0", GOTOOLCHAIN="local", GOFLAGS="-mod=mod")
    return env


def check_go() -> str:
    go = shutil.which("go")
    if not go:
        raise BuildError(
            "the Go toolchain is not on PATH: install Go >= "
            f"{versions.GO_MINIMUM[0]}.{versions.GO_MINIMUM[1]} (https://go.dev/dl) and retry"
        )
    output = subprocess.run([go, "version"], capture_output=True, text=True, check=False).stdout
    found = parse_go_version(output)
    if found is None or found < versions.GO_MINIMUM:
        raise BuildError(
            f"{output.strip() or 'go version failed'}: Kubernetes {versions.KUBERNETES} needs Go >= "
            f"{versions.GO_MINIMUM[0]}.{versions.GO_MINIMUM[1]} with GOTOOLCHAIN=local; install a newer Go"
        )
    return go


@dataclass
class Context:
    """What the steps of one build share: the cache root, the toolchain, the output, the
    control plane's build list (computed once, by whichever step needs it first) and the
    background processes to stop if the build fails."""

    root: Path
    go: str
    say: Say
    control_plane_list: Callable[["Context"], dict[str, str]]
    _list: dict[str, str] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _children: set[subprocess.Popen] = field(default_factory=set)
    cancelled: threading.Event = field(default_factory=threading.Event)

    def control_plane_build_list(self) -> dict[str, str]:
        with self._lock:
            if self._list is None:
                self._list = self.control_plane_list(self)
            return self._list

    def quiet(self, cmd: list[str], *, cwd: Path, log_path: Path) -> bool:
        """Run a preparing command (downloads) with its output in ``log_path``; False if it
        failed. Stopped by :meth:`cancel`."""
        with open(log_path, "w") as log:
            process = subprocess.Popen(cmd, cwd=cwd, env=go_env(), stdout=log, stderr=subprocess.STDOUT)
            with self._lock:
                self._children.add(process)
            try:
                return process.wait() == 0
            finally:
                with self._lock:
                    self._children.discard(process)

    def cancel(self) -> None:
        self.cancelled.set()
        with self._lock:
            for process in self._children:
                process.terminate()


def run_step(step: str, cmd: list[str], *, cwd: Path, log_path: Path, say: Say) -> int:
    """Run one long Go command, logging everything to ``log_path`` and printing a heartbeat
    with the number of packages compiled so far (go build -v prints one per line); the
    number compiled in all."""
    started = time.monotonic()

    def compiled() -> int:
        try:
            return compiled_packages(log_path.read_text(errors="replace"))
        except OSError:
            return 0

    with open(log_path, "w") as log:
        process = subprocess.Popen(cmd, cwd=cwd, env=go_env(), stdout=log, stderr=subprocess.STDOUT)
        done = threading.Event()

        def heartbeat() -> None:
            while not done.wait(30):
                say(f"  ... {step}: {int(time.monotonic() - started)}s elapsed, {compiled()} packages compiled so far")

        thread = threading.Thread(target=heartbeat, daemon=True)
        thread.start()
        try:
            code = process.wait()
        except BaseException:
            process.terminate()
            raise
        finally:
            done.set()
    if code != 0:
        tail = "".join(open(log_path, errors="replace").readlines()[-15:])
        raise BuildError(
            f"step '{step}' failed (exit {code}); full log: {log_path}\n{tail}\n"
            "What to try: check that the Go module proxy is reachable (GOPROXY), retry with "
            "GOSUMDB=off if the checksum database is unreachable, and make sure there are a few GB "
            "of free disk for the module and build caches."
        )
    count = compiled()
    say(f"  {step}: done in {int(time.monotonic() - started)}s ({count} packages compiled)")
    return count


def install(built: Path, target: Path) -> None:
    """Move the fresh binary into bin/ (a rename: atomic, and no second ~100 MB copy is
    left behind in build/)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(built, target)
    except OSError:  # build/ and bin/ on different filesystems
        temp = target.with_name(target.name + ".tmp")
        shutil.copy2(built, temp)
        os.replace(temp, target)
        built.unlink(missing_ok=True)


def downloaded_module(go: str, module: str, version: str, work: Path) -> dict:
    """Download ``module@version`` into the module cache; `go mod download -json`'s record
    (``GoMod``: its go.mod; ``Dir``: the extracted source)."""
    work.mkdir(parents=True, exist_ok=True)
    download = subprocess.run(
        [go, "mod", "download", "-json", f"{module}@{version}"],
        cwd=work, env=go_env(), capture_output=True, text=True, check=False,
    )
    if download.returncode != 0:
        raise BuildError(
            f"step 'download {module}@{version}' failed: {download.stderr.strip()[-800:]}\n"
            "What to try: check that the Go module proxy is reachable (GOPROXY)."
        )
    return json.loads(download.stdout)


def writable_tree(root: Path) -> None:
    """Make a copy of the (read-only) module cache writable, so it can be patched and,
    on the next build, removed."""
    if not root.exists():
        return
    for directory, _dirs, files in os.walk(root):
        os.chmod(directory, 0o755)
        for name in files:
            os.chmod(os.path.join(directory, name), 0o644)


@dataclass
class Step:
    title: str
    prepare: Callable[[], None]
    compile: Callable[[], str]  # returns how it was built, for the summary ("" if nothing to say)


@dataclass(frozen=True)
class StepResult:
    title: str
    seconds: int
    how: str


def run_plan(steps: list[Step], ctx: Context) -> list[StepResult]:
    """Prepare the first step, then compile each step in order while a background thread
    prepares the ones after it (their errors are raised when their turn comes)."""
    if not steps:
        return []
    steps[0].prepare()
    ready = [threading.Event() for _ in steps]
    ready[0].set()
    failures: dict[int, BaseException] = {}

    def prepare_the_rest() -> None:
        for index in range(1, len(steps)):
            if ctx.cancelled.is_set():
                failures[index] = BuildError("cancelled")
            else:
                started = time.monotonic()
                try:
                    steps[index].prepare()
                    ctx.say(f"  (in the background: {steps[index].title} prepared, its modules downloaded, "
                            f"in {int(time.monotonic() - started)}s)")
                except BaseException as exc:  # noqa: BLE001 - re-raised in the foreground
                    failures[index] = exc
            ready[index].set()

    background = threading.Thread(target=prepare_the_rest, name="go-prefetch", daemon=True)
    background.start()
    results = []
    try:
        for index, step in enumerate(steps):
            ready[index].wait()
            if index in failures:
                raise failures[index]
            started = time.monotonic()
            how = step.compile()
            results.append(StepResult(step.title, int(time.monotonic() - started), how))
    except BaseException:
        ctx.cancel()
        raise
    finally:
        background.join(timeout=30)
    return results


@dataclass(frozen=True)
class GoProgram:
    """A released Go program, built through a wrapper module (go_wrapper.py)."""

    name: str
    module: str
    version: str
    packages: tuple[str, ...]      # its main packages; () for the wrapper's own small main
    outputs: Mapping[str, Path]    # the name `go build` gives a binary -> its place in the cache
    stamp: Callable[[str], str] = lambda _go_mod: "-s -w"  # -ldflags, from the module's go.mod
    tags: str = ""
    shared: bool = False           # try the control plane's module graph first
    main: go_wrapper.SmallMain | None = None
    patch: Callable[[Path], None] | None = None  # applied to a copy of the module's source
    revision: str = ""             # what else the binary depends on (kwok's patch, a small main)

    @property
    def key(self) -> str:
        return go_wrapper.cache_key(self.name, self.version, self.revision)

    @property
    def title(self) -> str:
        return f"{self.name} {self.version}"


class ProgramBuild:
    """The step that builds one :class:`GoProgram`."""

    def __init__(self, program: GoProgram, ctx: Context):
        self.program = program
        self.ctx = ctx
        self.work = ctx.root / "build" / program.key
        self.ldflags = ""
        self.shared_problem = ""

    def step(self) -> Step:
        return Step(self.program.title, self.prepare, self.compile)

    def _wrapper(self, directory: Path, requires: Mapping[str, str], local: Mapping[str, Path]) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "go.mod").write_text(go_wrapper.go_mod(self.program.name, requires, directories=local))
        if self.program.main:
            (directory / "main.go").write_text(self.program.main.source())

    def _packages(self) -> list[str]:
        return list(self.program.packages) or ["."]

    def _list_deps(self, graph: Path) -> bool:
        # `go list -deps` loads every package the build will compile: it downloads exactly
        # their modules and compiles nothing.
        return self.ctx.quiet([self.ctx.go, "list", "-deps", *self._packages()], cwd=graph,
                              log_path=graph / "prepare.log")

    def prepare(self) -> None:
        program = self.program
        record = downloaded_module(self.ctx.go, program.module, program.version, self.work)
        self.ldflags = program.stamp(Path(record["GoMod"]).read_text())
        source = Path(record["Dir"])
        local: dict[str, Path] = {}
        if program.patch:
            source = _fresh_copy(source, self.work / "src")
            program.patch(source)
            local[program.module] = source
        self._wrapper(self.work, {program.module: program.version}, local)
        if program.shared:
            self._prepare_shared(source)
            if not self.shared_problem:
                return
        self._list_deps(self.work)  # on failure, the build will say what is wrong

    def _prepare_shared(self, source: Path) -> None:
        """The wrapper in the control plane's graph (go_wrapper): the program from a copy of
        its source whose go.mod asks for the control plane's versions."""
        program = self.program
        control_plane = self.ctx.control_plane_build_list()
        if not control_plane:
            self.shared_problem = "the control plane's wrapper has no build list to share"
            return
        graph = self.work / "shared"
        copy = _fresh_copy(source, graph / "src")
        go_mod = copy / "go.mod"
        go_mod.write_text(go_wrapper.pin_requirements(go_mod.read_text(), control_plane))
        (copy / "go.sum").unlink(missing_ok=True)  # a dependency's go.sum is not read; stale anyway
        requires = {program.module: program.version,
                    **go_wrapper.control_plane_requirements(control_plane, program_module=program.module)}
        self._wrapper(graph, requires, {program.module: copy})
        if not self._list_deps(graph):
            self.shared_problem = f"it does not load there ({graph / 'prepare.log'})"
            return
        listing = subprocess.run([self.ctx.go, "list", "-m", "-f", go_wrapper.LIST_FORMAT, "all"], cwd=graph,
                                 env=go_env(), capture_output=True, text=True, check=False)
        off = go_wrapper.off_the_graph(go_wrapper.build_list(listing.stdout), control_plane) if listing.returncode == 0 else []
        if off:
            # Whatever imports them (for golang.org/x/text: nearly all of client-go) would be
            # compiled anew: little to gain for versions other than its own, so as released.
            self.shared_problem = (f"a dependency needs newer {', '.join(off[:4])}{' ...' if len(off) > 4 else ''} "
                                   f"than the control plane's ({graph / 'go.mod'})")

    def _build(self, graph: Path, what: str) -> None:
        program = self.program
        out = graph / "out"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        cmd = [self.ctx.go, "build", "-v", "-trimpath"]
        if program.tags:
            cmd += ["-tags", program.tags]
        cmd += ["-ldflags", self.ldflags, "-o", str(out) + "/", *self._packages()]
        self.ctx.say(f"- {program.title}: building {', '.join(program.outputs)} in {what}")
        run_step(f"build {program.title}", cmd, cwd=graph, log_path=graph / "build.log", say=self.ctx.say)
        for name, target in program.outputs.items():
            if not (out / name).exists():
                raise BuildError(f"build {program.title} wrote {sorted(p.name for p in out.iterdir())} to {out}, "
                                 f"not {name}: the package's name changed in this release?")
            install(out / name, target)

    def compile(self) -> str:
        if self.program.shared and not self.shared_problem:
            try:
                self._build(self.work / "shared", SHARED_GRAPH)
                return SHARED_GRAPH
            except BuildError:
                self.shared_problem = f"it does not compile there ({self.work / 'shared' / 'build.log'})"
        if self.shared_problem:
            self.ctx.say(f"- {self.program.title}: not in {SHARED_GRAPH}: {self.shared_problem}; "
                         f"building it in {OWN_GRAPH}, as released")
        self._build(self.work, OWN_GRAPH)
        return f"{OWN_GRAPH}: {self.shared_problem.split(' (')[0]}" if self.shared_problem else ""


def _fresh_copy(source: Path, copy: Path) -> Path:
    """A writable copy of a module's source (the module cache is read-only), made anew."""
    writable_tree(copy)
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(source, copy, copy_function=shutil.copyfile)
    writable_tree(copy)
    return copy
