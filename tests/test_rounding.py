"""Rounding of real softmax rows never refuses a coupling: over 10^5 rows of each shipped model and of a BERT-size
vocabulary, at four temperatures, the sampler's own rows stay within the derived rounding tolerance (a row summing to
2 does not, tests/test_bad_inputs.py)."""

import pytest
import torch

from mlm_dynamics.corpus import sample_sentences
from mlm_dynamics.models.pretrained import load_english_mlm
from mlm_dynamics.sampling.categorical import tempered_log_probs
from mlm_dynamics.sampling.coupling import probability_rows, rounding_tolerance

TEMPERATURES = (0.5, 1.0, 2.0, 4.0)
ROWS = 100_000


def worst(allowed: torch.Tensor, chunks) -> float:
    """Largest ``|sum - 1|`` of the proposal rows for logits chunks ``[N, V]`` at every temperature, made as the
    samplers make them (``tempered_log_probs`` in float64, then exp), after checking that :func:`probability_rows`
    takes them all."""
    error = 0.0
    for chunk in (piece for logits in chunks for piece in logits.split(256)):  # small pieces: no page-fault storm
        for tau in TEMPERATURES:
            rows = tempered_log_probs(chunk, allowed, tau, dtype=torch.float64).exp()
            probability_rows(rows, "p")  # raises if rounding were refused
            error = max(error, float((rows.double().sum(-1) - 1).abs().max()))
    return error


def logit_chunks(model_logits, batches):
    """Logits of ``batches`` through ``model_logits`` until 10^5 proposal rows (rows x temperatures) are reached."""
    count = 0
    for tokens in batches:
        logits = model_logits(tokens)
        yield logits
        count += len(logits) * len(TEMPERATURES)
        if count >= ROWS:
            return
    raise AssertionError(f"only {count} rows: the test needs {ROWS}")


@pytest.mark.slow
def test_the_english_models_rows_are_within_rounding():
    denoiser, codec = load_english_mlm()
    sentences = sample_sentences(1200, generator=0)
    batches = (torch.nn.utils.rnn.pad_sequence([torch.tensor(codec.encode(s)[:32]) for s in sentences[k:k + 64]],
                                               batch_first=True, padding_value=denoiser.vocab.pad_id)
               for k in range(0, len(sentences), 64))

    def logits(tokens: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            out = denoiser.model(input_ids=tokens, attention_mask=(tokens != denoiser.vocab.pad_id).long()).logits
        return out[tokens != denoiser.vocab.pad_id].float()

    error = worst(denoiser.vocab.allowed_mask(), logit_chunks(logits, batches))
    allowed = rounding_tolerance(denoiser.vocab.size, torch.float64)
    assert error <= allowed, (error, allowed)


@pytest.mark.slow
def test_antiberty_and_bert_size_rows_are_within_rounding(antiberty):
    denoiser, _ = antiberty
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(5, denoiser.vocab.size, (ROWS // (len(TEMPERATURES) * 20) + 1, 20), generator=generator)
    tokens[:, 0], tokens[:, -1] = 2, 3

    def logits(batch: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return denoiser.model(input_ids=batch).logits.flatten(0, 1).float()

    rows = logit_chunks(logits, tokens.split(100))
    assert worst(denoiser.vocab.allowed_mask(), rows) <= rounding_tolerance(denoiser.vocab.size, torch.float64)

    def bert_size():  # the spread of real logits: N(0, 3) and a few tokens 10-20 nats ahead, 2048 rows at a time
        for _ in range(ROWS // (len(TEMPERATURES) * 2048) + 1):
            chunk = torch.randn(2048, 30_522, generator=generator) * 3
            yield chunk.scatter(1, torch.randint(30_522, (2048, 3), generator=generator),
                                10 + 10 * torch.rand(2048, 3, generator=generator))

    assert worst(torch.ones(30_522, dtype=torch.bool), bert_size()) <= rounding_tolerance(30_522, torch.float64)
