"""The committed code in agent/_proto/ is exactly what scripts/gen_protos.py makes from protos/.

Generated code is never edited by hand; this catches a .proto change committed
without regenerating, a hand edit, and a generator version drift.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gen_protos.py"
COMMITTED = ROOT / "agent" / "_proto"
REGENERATE = f"regenerate with: python {SCRIPT.relative_to(ROOT)}"


def _load_generate() -> Callable[[Path], None]:
    spec = importlib.util.spec_from_file_location("gen_protos", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    generate: Callable[[Path], None] = module.generate
    return generate


def _generated_files(root: Path) -> set[Path]:
    """Every file under ``root`` relative to it, without bytecode caches."""
    return {
        path.relative_to(root)
        for path in root.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("proto") / "_proto"
    _load_generate()(out)
    return out


def test_regeneration_produces_every_committed_file(regenerated: Path) -> None:
    new, committed = _generated_files(regenerated), _generated_files(COMMITTED)
    assert new, "scripts/gen_protos.py generated nothing"
    missing = sorted(str(COMMITTED.relative_to(ROOT) / p) for p in committed - new)
    assert not missing, f"no longer generated from protos/, delete or {REGENERATE}: {missing}"
    extra = sorted(str(COMMITTED.relative_to(ROOT) / p) for p in new - committed)
    assert not extra, f"generated but missing from agent/_proto, {REGENERATE}: {extra}"


def test_every_generated_file_is_byte_identical_to_the_committed_one(regenerated: Path) -> None:
    def differs(rel: Path) -> bool:
        committed = COMMITTED / rel
        return not committed.is_file() or committed.read_bytes() != (regenerated / rel).read_bytes()

    stale = sorted(str(COMMITTED.relative_to(ROOT) / rel) for rel in _generated_files(regenerated) if differs(rel))
    assert not stale, f"out of sync with protos/ (never edit generated code), {REGENERATE}: {stale}"
