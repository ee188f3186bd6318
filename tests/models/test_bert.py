"""all-MiniLM-L6-v2: lumos' sentence embeddings (a padded batch) against transformers'
BertModel on each sentence alone, and the similarities in notes/models.md."""

from __future__ import annotations

import os

import numpy as np
import pytest

from lumos import cli
from lumos.models import bert
from tests.models.weights import require

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SENTENCES = ["A man is eating food.", "A man is eating a piece of bread.",
             "The girl is carrying a baby.", "Compilers search.",
             "Ünïcode, punctuation -- and a rather longer sentence: does the padding mask hold?"]


@pytest.fixture(scope="module")
def encoder() -> bert.SentenceEncoder:
    require(bert.PACKAGE)
    return bert.SentenceEncoder(max_batch=4)  # five sentences: two batches


@pytest.fixture(scope="module")
def embeddings(encoder: bert.SentenceEncoder) -> np.ndarray:
    return encoder.encode(SENTENCES)


def test_matches_transformers(encoder: bert.SentenceEncoder, embeddings: np.ndarray) -> None:
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    model = tf.BertModel.from_pretrained(require(bert.PACKAGE) / "model",
                                         add_pooling_layer=False).eval()
    lengths = encoder.tokenize(SENTENCES)[1].sum(1)
    assert len(set(lengths)) == len(SENTENCES)  # every row but the longest is padded
    for sentence, got in zip(SENTENCES, embeddings, strict=True):
        ids, mask = encoder.tokenize([sentence])
        with torch.no_grad():
            states = model(input_ids=torch.from_numpy(ids)).last_hidden_state[0]
        want = torch.nn.functional.normalize(states.mean(0), dim=0).numpy()
        cos = float(got @ want / np.linalg.norm(got) / np.linalg.norm(want))
        assert cos >= 0.99999, (sentence, cos)
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_known_similarities(embeddings: np.ndarray) -> None:
    sim = embeddings[:3] @ embeddings[:3].T
    assert np.allclose(np.diag(sim), 1.0, atol=1e-5)
    assert round(float(sim[0, 1]), 4) == 0.7553
    assert round(float(sim[0, 2]), 3) == -0.105


def test_batch_size_and_length_vary(encoder: bert.SentenceEncoder,
                                    embeddings: np.ndarray) -> None:
    """One compiled program: a smaller batch with other lengths gives the same rows."""
    alone = encoder.encode(SENTENCES[3:4])
    np.testing.assert_allclose(alone[0], embeddings[3], atol=1e-5)


def test_cli(capsys: pytest.CaptureFixture[str]) -> None:
    require(bert.PACKAGE)
    assert cli.main(["embed", "minilm", *SENTENCES[:3], "--runtime", "reference"]) == 0
    out = capsys.readouterr().out
    assert "0.7553" in out and "-0.1050" in out and "[2]" in out
    assert cli.main(["bench", "minilm", "--batch", "2", "--seq", "8", "--rounds", "1",
                     "--runtime", "reference"]) == 0
    assert "minilm batch 2 x 8 tokens" in capsys.readouterr().out


@pytest.mark.slow
def test_cpu_runtime(embeddings: np.ndarray) -> None:
    from lumos.runtime import CpuRuntime
    from lumos.search import CompileOptions

    got = bert.SentenceEncoder(runtime=CpuRuntime(), max_batch=8,
                               options=CompileOptions(limit=0)).encode(SENTENCES)
    np.testing.assert_allclose(got, embeddings, atol=1e-5)
