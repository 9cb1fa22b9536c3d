"""The English MLM shipped in the package: loads offline with plain transformers, predicts held-out English well above
chance, and fills masks with words."""

import re

import pytest
import torch

from mlm_dynamics.corpus import masked_windows, token_streams
from mlm_dynamics.models import english_mlm_dir, load_english_mlm
from mlm_dynamics.models.evaluation import PROBES, fill_mask, masked_accuracy


@pytest.fixture(scope="module")
def english():
    return load_english_mlm()


def test_loads_with_plain_transformers():
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    model = AutoModelForMaskedLM.from_pretrained(english_mlm_dir())
    tokenizer = AutoTokenizer.from_pretrained(english_mlm_dir())
    assert model.config.model_type == "bert" and tokenizer.mask_token == "[MASK]"
    assert (english_mlm_dir() / "model.safetensors").stat().st_size < 50 * 2**20  # stored in fp16
    assert next(model.parameters()).dtype == torch.float32  # loaded in float32: a CPU fine-tune does not go NaN


def test_heldout_accuracy_is_far_above_chance(english):
    """16 held-out windows per genre (about 300 masked tokens each). The most frequent token ('the') is about 6 %
    of the text; requiring 20 % leaves a margin of more than 10 standard errors (sqrt(0.25 / 300) = 0.03) below the
    model card's figures while catching a broken head, tokenizer or weights (chance is 1 / 30,522)."""
    denoiser, codec = english
    tokenizer = codec.tokenizer
    for genre, stream in token_streams(tokenizer, "heldout").items():
        _, masked, labels = masked_windows(stream, length=128, count=16, cls_id=tokenizer.cls_token_id,
                                           sep_id=tokenizer.sep_token_id, mask_id=tokenizer.mask_token_id)
        accuracy, count = masked_accuracy(denoiser, masked, labels)
        assert count > 200 and accuracy > 0.2, (genre, accuracy)


def test_fill_mask_returns_words(english):
    denoiser, codec = english
    for text in PROBES:
        top = fill_mask(denoiser, codec, text)
        assert len(top) == 5
        for token, probability in top:
            assert not token.startswith("[") and not token.startswith("##"), (text, token)
            assert 0 < probability <= 1
        assert any(re.fullmatch(r"[a-z]+", token) for token, _ in top), (text, top)
    sea = dict(fill_mask(denoiser, codec, "The ship sailed across the [MASK]."))
    assert "sea" in sea or "ocean" in sea or "water" in sea


def test_chains_run_on_the_english_model(english):
    from mlm_dynamics import GlauberSampler

    denoiser, codec = english
    tokens = torch.tensor([codec.encode("the old man walked slowly down the road .")] * 2)
    sampler = GlauberSampler(denoiser, 1.0)
    state = sampler.init_state(tokens, generator=0)
    for _ in sampler.run(state, 10):
        pass
    assert (state.tokens[:, 0] == codec.tokenizer.cls_token_id).all()
    assert all(isinstance(codec.decode(row.tolist()), str) for row in state.tokens)
