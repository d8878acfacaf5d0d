from __future__ import annotations

import subprocess
import sys

import clew


def test_all_names_exist_once() -> None:
    for name in clew.__all__:
        assert hasattr(clew, name), name
    assert len(set(clew.__all__)) == len(clew.__all__)
    assert {"Engine", "EngineConfig", "SearchResult", "Hit", "Contribution"} <= set(clew.__all__)


def test_import_is_light() -> None:
    code = (
        "import sys, clew; heavy = [m for m in ('torch', 'spacy', 'onnxruntime', "
        "'sentence_transformers') if m in sys.modules]; print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
