"""Lab 6's online path, executed without the hub.

The online path fine-tunes `google-t5/t5-small` on BillSum where the hub is reachable (Colab). Here it
runs through the same `from_pretrained(CHECKPOINT)` and `load_dataset(BILLSUM, split="ca_test",
streaming=True)` calls against local stand-ins built by the test: a small T5 checkpoint saved in the hub's
format (weights, config, tokenizer) and a folder laid out like the hub's BillSum repository (a parquet file
`data/ca_test-00000-of-00001.parquet` with BillSum's columns). Only the hub is missing, and the kernel is
kept from reaching any other host as well. It runs the solutions in fast mode, on the CPU, so it also takes
the configuration a CPU-only Colab runtime gets.
"""

from __future__ import annotations

import ast
import json
import random
import re

import nbformat
import pytest

from labtools import nbcells
from labtools.build.editions import execute
from labtools.labs import get_lab

datasets = pytest.importorskip("datasets")
pytest.importorskip("accelerate")
torch = pytest.importorskip("torch")
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # noqa: E402
from transformers import PreTrainedTokenizerFast, T5Config, T5ForConditionalGeneration  # noqa: E402

LAB = get_lab("lab06_t5")

# Runs first in the kernel: any connection or name lookup for a host other than this machine is refused
# and recorded (the kernel's own channels are ZeroMQ's, which do not go through Python's socket module).
NO_NETWORK = '''
import socket as _socket
NETWORK_ATTEMPTS = []
_LOCAL = ("localhost", "127.0.0.1", "::1", "0.0.0.0", "", None)


def _refuse(what):
    NETWORK_ATTEMPTS.append(str(what))
    raise OSError(f"the test keeps this kernel off the network: {what}")


def _guarded(connect):
    def guarded(self, address):
        if self.family in (_socket.AF_INET, _socket.AF_INET6) and address[0] not in _LOCAL:
            _refuse(address)
        return connect(self, address)
    return guarded


def _guarded_getaddrinfo(host, *args, _getaddrinfo=_socket.getaddrinfo, **kwargs):
    if host not in _LOCAL and not isinstance(host, bytes):
        _refuse(host)
    return _getaddrinfo(host, *args, **kwargs)


_socket.socket.connect = _guarded(_socket.socket.connect)
_socket.socket.connect_ex = _guarded(_socket.socket.connect_ex)
_socket.getaddrinfo = _guarded_getaddrinfo
'''
REPORT = 'import json as _json\nprint("NETWORK_ATTEMPTS=" + _json.dumps(NETWORK_ATTEMPTS))'


def _bills(n: int, seed: int = 0) -> list[dict]:
    """Short bills with BillSum's columns (text, summary, title)."""
    rng = random.Random(seed)
    agencies = ["Energy", "Labor", "Education", "Transportation", "Agriculture", "the Interior"]
    recipients = ["States", "counties", "school districts", "tribes", "cities", "nonprofit groups"]
    purposes = ["repair rural roads", "train nurses", "replace lead pipes", "expand broadband",
                "restore wetlands", "modernize schools"]
    rows = []
    for _ in range(n):
        agency, recipient, purpose = rng.choice(agencies), rng.choice(recipients), rng.choice(purposes)
        amount, year = rng.choice([5, 10, 25, 50, 100, 200]), rng.randint(2019, 2025)
        title = f"{purpose.split()[-1].title()} {rng.choice(['Access', 'Investment', 'Security'])} Act of {year}"
        text = (f"SECTION 1. SHORT TITLE. This Act may be cited as the {title}. SEC. 2. PROGRAM. The Secretary of "
                f"{agency} shall award grants to {recipient} to {purpose}. SEC. 3. FUNDING. There are authorized "
                f"to be appropriated ${amount},000,000 for each of fiscal years {year + 1} through {year + 4}.")
        summary = (f"{title}. This bill directs the Department of {agency} to award grants to {recipient} to "
                   f"{purpose}. It authorizes ${amount} million for each of fiscal years {year + 1} through {year + 4}.")
        rows.append({"text": text, "summary": summary, "title": title})
    return rows


def _checkpoint(folder, texts) -> None:
    """A T5 checkpoint as the hub holds one: config, weights and a fast tokenizer (T5's ids: pad 0, eos 1,
    unk 2), small enough to train in seconds. The tokenizer is the lab's kind, BPE wrapped as
    PreTrainedTokenizerFast, which saves and reloads through AutoTokenizer."""
    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Metaspace(), pre_tokenizers.Punctuation()])
    backend.decoder = decoders.Metaspace()
    backend.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=400, special_tokens=["<pad>", "</s>", "<unk>"],
                                                           show_progress=False))
    backend.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="</s>",
                                        unk_token="<unk>", model_max_length=512)
    config = T5Config(vocab_size=len(tokenizer), d_model=32, d_kv=8, num_heads=4, d_ff=64, num_layers=1,
                      num_decoder_layers=1, dropout_rate=0.1, feed_forward_proj="relu", pad_token_id=0,
                      eos_token_id=1, decoder_start_token_id=0)
    torch.manual_seed(0)
    T5ForConditionalGeneration(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


@pytest.fixture(scope="module")
def online_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab06-hub-stand-ins")
    bills = _bills(64)
    billsum = root / "billsum"
    (billsum / "data").mkdir(parents=True)
    datasets.Dataset.from_list(bills).to_parquet(str(billsum / "data" / "ca_test-00000-of-00001.parquet"))
    _checkpoint(root / "t5", ["summarize: " + b["text"] for b in bills] + [b["summary"] for b in bills])

    nb = nbcells.read(LAB.solutions_path())
    nb.cells.insert(0, nbformat.v4.new_code_cell(NO_NETWORK))
    nb.cells.append(nbformat.v4.new_code_cell(REPORT))
    env = {"LABS_PATH": "online", "LABS_T5_CHECKPOINT": str(root / "t5"), "LABS_BILLSUM": str(billsum),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_HOME": str(root / "hf-home"), "LABS_FAST": "1", "LABS_THREADS": "1"}
    done = execute(nb, env_overrides=env, allow_errors=True)
    outputs = ["".join(o.get("text", "") for o in c.outputs if o.output_type == "stream")
               for c in done.cells if c.cell_type == "code"]
    errors = [(c.source[:70], o.ename, o.evalue) for c in done.cells if c.cell_type == "code"
              for o in c.outputs if o.output_type == "error"]
    return "\n".join(outputs), errors


def test_the_online_path_runs_against_local_stand_ins(online_run):
    out, errors = online_run
    assert errors == [], f"cells failed on the online path: {errors}"
    assert "Path: ONLINE" in out and "Path: OFFLINE" not in out
    assert "32 training pairs, 8 test pairs" in out, "the pairs must come from the stand-in BillSum's ca_test split"
    assert "parameters:" in out and "T5ForConditionalGeneration" in out


def test_nothing_reaches_the_network(online_run):
    out, _ = online_run
    attempts = re.search(r"NETWORK_ATTEMPTS=(\[.*\])", out)
    assert attempts, "the last cell did not run"
    assert json.loads(attempts.group(1)) == [], "the online path tried to reach the network"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU machine takes the online path's full configuration")
def test_without_a_gpu_the_cpu_configuration_is_taken_and_said(online_run):
    out, _ = online_run
    assert "No GPU: the online path runs a configuration for the CPU that finishes in minutes" in out
    assert "'max_input_length': 128" in out


def test_the_trainer_evaluates_every_epoch_and_keeps_the_best_checkpoint(online_run):
    out, _ = online_run
    epochs = re.findall(r"epoch (\d+): validation loss (\d+\.\d+), ROUGE-Lsum (\d+\.\d+)", out)
    assert [e[0] for e in epochs] == ["1", "2"], out[-3000:]
    best = re.search(r"best checkpoint: epoch (\d) of 2, validation loss (\d+\.\d+) \(checkpoint-\d+\)", out)
    assert best, "the Trainer kept no best checkpoint"
    assert float(best.group(2)) == min(float(e[1]) for e in epochs)


def test_rouge_is_reported_with_stemming_and_lsum(online_run):
    out, _ = online_run
    for row in ("your rouge_n and rouge_l", "rouge-score", "rouge-score, use_stemmer=True",
                "and one sentence per line"):
        assert re.search(re.escape(row) + r"\s+(\d\.\d{3}\s+){3}(\d\.\d{3}|—)", out), f"no ROUGE row {row!r}"


def test_the_saved_model_summarizes_as_summarize_does(online_run):
    out, _ = online_run
    assert "REFERENCE:" in out and "SUMMARY:" in out
    assert "the same summary as your summarize(..., num_beams=4): True" in out


def test_the_hugging_face_part_installs_what_the_lab_declares():
    """The packages Part 14 (the Hugging Face stack) installs on Colab are the lab's optional ones (the Colab-like test installs those)."""
    source = "\n".join(c.source for c in nbcells.read(LAB.source_path()).cells if c.cell_type == "code")
    declared = re.findall(r"^HF_STACK = (\{.*\})$", source, flags=re.M)
    assert [ast.literal_eval(d) for d in declared] == [LAB.optional_packages]
