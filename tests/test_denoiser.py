import pytest
import torch
from transformers import (
    BertConfig,
    BertForMaskedLM,
    DistilBertConfig,
    DistilBertForMaskedLM,
    ElectraConfig,
    ElectraForMaskedLM,
    ModernBertConfig,
    ModernBertForMaskedLM,
    RobertaConfig,
    RobertaForMaskedLM,
)

from mlm_dynamics import FullSequenceDenoiser, MaskedLMDenoiser, VocabInfo
from mlm_dynamics.models import EXAMPLE_ANTIBODIES, ResidueCodec

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, vocab_size=60)
FAMILIES = {
    "bert": lambda: BertForMaskedLM(BertConfig(**SMALL)),
    "roberta": lambda: RobertaForMaskedLM(RobertaConfig(**SMALL, pad_token_id=1)),
    "distilbert": lambda: DistilBertForMaskedLM(DistilBertConfig(dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                                                                 vocab_size=60)),
    "modernbert": lambda: ModernBertForMaskedLM(ModernBertConfig(**SMALL, pad_token_id=0, bos_token_id=1,
                                                                 eos_token_id=2, cls_token_id=1, sep_token_id=2)),
}
MASK_ID = 4


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("num_masked", [1, 3])
def test_head_at_positions_matches_full_model(family, num_masked):
    torch.manual_seed(0)
    model = FAMILIES[family]().eval()
    denoiser = MaskedLMDenoiser(model, mask_id=MASK_ID, special_ids=[0, 1, 2, 3])
    tokens = torch.randint(5, 60, (3, 12))
    positions = torch.stack([torch.randperm(12)[:num_masked] for _ in range(3)])
    ours = denoiser.conditional_logits(tokens, positions)
    with torch.no_grad():
        full = model(input_ids=tokens.scatter(1, positions, MASK_ID)).logits
    reference = full.gather(1, positions[..., None].expand(-1, -1, full.shape[-1]))
    assert ours.shape == (3, num_masked, 60)
    torch.testing.assert_close(ours, reference, atol=1e-5, rtol=1e-5)
    # the conditional at a position does not depend on the token that was there
    altered = tokens.scatter(1, positions, 7)
    torch.testing.assert_close(denoiser.conditional_logits(altered, positions), ours, atol=1e-5, rtol=1e-5)


def test_vocab_metadata_and_max_length():
    roberta = MaskedLMDenoiser(FAMILIES["roberta"](), mask_id=MASK_ID, special_ids=[0, 1, 2], frame_ids=[0, 2, 1])
    assert roberta.vocab.max_length == 512 - 2  # positions start after the padding index
    assert roberta.vocab.forbidden_ids == (0, 1, 2, 4)
    assert roberta.vocab.frame_ids == (0, 1, 2)
    with pytest.raises(ValueError, match="exceeds the model's maximum 510"):
        roberta.conditional_logits(torch.full((1, 511), 7), torch.tensor([3]))


def test_from_pretrained_local_directory(tmp_path):
    from transformers import BertTokenizer

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(54)] + ["[unused0]"]
    tokenizer = BertTokenizer(vocab={w: i for i, w in enumerate(words)}, do_lower_case=False)
    torch.manual_seed(0)
    model = FAMILIES["bert"]()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    denoiser, codec = MaskedLMDenoiser.from_pretrained(str(tmp_path))
    ids = codec.encode("w3 w7 w9")
    assert ids == [2, 8, 12, 14, 3]
    assert codec.decode(ids) == "w3 w7 w9"
    assert denoiser.vocab.mask_id == 4 and set(denoiser.vocab.forbidden_ids) == {0, 1, 2, 3, 4, 59}
    sites = denoiser.resampleable_sites(torch.tensor([ids]))
    assert sites.tolist() == [[1, 2, 3]]
    with torch.no_grad():
        reference = model.eval()(input_ids=torch.tensor([[2, 8, 4, 14, 3]])).logits[:, 2]
    torch.testing.assert_close(denoiser.conditional_logits(torch.tensor([ids]), torch.tensor([2]))[:, 0], reference)


def test_bad_models_and_inputs_raise_clearly():
    with pytest.raises(ValueError, match="mask_id"):
        MaskedLMDenoiser(FAMILIES["bert"](), mask_id=None)
    electra = ElectraForMaskedLM(ElectraConfig(embedding_size=16, **SMALL))
    with pytest.raises(ValueError, match="unsupported masked-LM family 'electra'"):
        MaskedLMDenoiser(electra, mask_id=MASK_ID)
    denoiser = MaskedLMDenoiser(FAMILIES["bert"](), mask_id=MASK_ID)
    with pytest.raises(ValueError, match="non-empty"):
        denoiser.conditional_logits(torch.zeros(0, 5, dtype=torch.long), torch.zeros(0, 1, dtype=torch.long))
    with pytest.raises(ValueError, match=r"tokens must lie in \[0, 60\)"):
        denoiser.conditional_logits(torch.full((1, 5), 60), torch.tensor([1]))
    with pytest.raises(ValueError, match="positions must lie"):
        denoiser.conditional_logits(torch.full((1, 5), 7), torch.tensor([5]))
    with pytest.raises(ValueError, match="distinct"):
        denoiser.conditional_logits(torch.full((1, 5), 7), torch.tensor([[1, 1]]))
    with pytest.raises(ValueError, match="integer tensor"):
        denoiser.conditional_logits(torch.full((1, 5), 7.0), torch.tensor([1]))


def test_nan_logits_raise():
    vocab = VocabInfo(size=6, mask_id=5)
    broken = FullSequenceDenoiser(lambda x: torch.full((*x.shape, 6), float("nan")), vocab)
    with pytest.raises(FloatingPointError, match="NaN/inf logits"):
        broken.conditional_logits(torch.zeros(2, 4, dtype=torch.long), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="mask_id"):
        FullSequenceDenoiser(lambda x: x, VocabInfo(size=6))


def test_full_sequence_denoiser_masks_and_gathers():
    vocab = VocabInfo(size=6, mask_id=5)
    seen = []

    def model(x):
        seen.append(x.clone())
        return torch.nn.functional.one_hot(x, 6).float()

    logits = FullSequenceDenoiser(model, vocab).conditional_logits(torch.tensor([[0, 1, 2, 3]]), torch.tensor([[1, 3]]))
    assert seen[0].tolist() == [[0, 5, 2, 5]]
    assert logits.argmax(-1).tolist() == [[5, 5]]


def test_residue_codec_round_trip_and_errors():
    codec = ResidueCodec()
    ids = codec.encode("ACY")
    assert ids == [2, 5, 6, 24, 3]
    assert codec.decode(ids) == "ACY"
    with pytest.raises(ValueError, match=r"residues \['B', 'X'\]"):
        codec.encode("AXB")


def test_antiberty_head_loaded_masked_accuracy(antiberty):
    """15 % random masking of real antibodies: a loaded head is right ~88 % of the time, chance is 5 %."""
    denoiser, codec = antiberty
    generator = torch.Generator().manual_seed(0)
    correct = total = 0
    for sequence in EXAMPLE_ANTIBODIES:
        tokens = torch.tensor([codec.encode(sequence)])
        sites = denoiser.resampleable_sites(tokens)[0]
        chosen = sites[torch.randperm(len(sites), generator=generator)[: int(0.15 * len(sites))]]
        logits = denoiser.conditional_logits(tokens, chosen[None])
        correct += int((logits[0].argmax(-1) == tokens[0, chosen]).sum())
        total += len(chosen)
    assert total > 70
    assert correct / total > 0.75


def test_padded_rows_give_the_conditionals_of_the_unpadded_sequences():
    """A batch of different lengths, padded with [PAD]: attention masks the padding, so each row's conditionals
    equal those of its sequence alone; padded_sites lists each row's own sites."""
    from mlm_dynamics.training import tiny_bert_denoiser

    denoiser = tiny_bert_denoiser(seed=3).eval()
    short, long = [1, 5, 6, 7, 2], [1, 8, 9, 10, 11, 12, 2]
    batch = torch.tensor([[*short, 0, 0], long])
    sites, counts = denoiser.padded_sites(batch)
    assert counts.tolist() == [3, 5] and sites[0, :3].tolist() == [1, 2, 3] and sites[1].tolist() == [1, 2, 3, 4, 5]
    positions = torch.tensor([[2], [4]])
    with torch.no_grad():
        together = denoiser.conditional_logits(batch, positions)
        alone = [denoiser.conditional_logits(torch.tensor([row]), positions[k:k + 1]) for k, row in
                 enumerate((short, long))]
    torch.testing.assert_close(together, torch.cat(alone), rtol=1e-5, atol=1e-5)
