"""Serving never imports training: polyvox.train imports the models, not the reverse."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "polyvox"


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_serving_code_does_not_import_training_code() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent)
        if relative.parts[1] == "train" or relative.name == "cli.py" and len(relative.parts) == 2:
            continue  # polyvox.train itself; the CLI's `train` subcommand dispatches to it
        for name in _imported_modules(path):
            if name == "polyvox.train" or name.startswith("polyvox.train."):
                offenders.append(f"{relative} imports {name}")
    assert not offenders, offenders


def test_loading_the_default_models_loads_no_training_code() -> None:
    code = ("import sys; from polyvox.models.registry import load_model; "
            "load_model('pocket/joe-ar'); load_model('pocket/english_2m'); "
            "print(sorted(m for m in sys.modules if m.startswith('polyvox.train')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
