"""Loading a bench/ script as a module, for the unit tests of its pure parts.

The scripts import their sibling modules (apirequests, controlplane, ...) by name, as
they do when run (sys.path[0] is bench/ then): bench/ is on sys.path while one loads."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load_bench_script(filename: str) -> ModuleType:
    """``bench/<filename>`` as a module named ``<stem>_for_tests``."""
    sys.path.insert(0, str(BENCH))
    try:
        name = f"{Path(filename).stem}_for_tests"
        spec = importlib.util.spec_from_file_location(name, BENCH / filename)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))
