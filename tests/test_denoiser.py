import pytest
import torch
import transformers
from transformers import (
    BertConfig,
    BertForMaskedLM,
    DistilBertConfig,
    DistilBertForMaskedLM,
    FunnelConfig,
    FunnelForMaskedLM,
    ModernBertConfig,
    ModernBertForMaskedLM,
    RobertaConfig,
    RobertaForMaskedLM,
)

from mlm_dynamics import FullSequenceDenoiser, MaskedLMDenoiser, VocabInfo, load_diffusion_lm
from mlm_dynamics.models import EXAMPLE_ANTIBODIES, ResidueCodec

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, vocab_size=60)


def family(name: str, **extra):
    """``XForMaskedLM(XConfig(**SMALL, **extra))`` from transformers, built on demand."""
    return lambda: getattr(transformers, f"{name}ForMaskedLM")(getattr(transformers, f"{name}Config")(**SMALL,
                                                                                                       **extra))


FAMILIES = {
    "bert": lambda: BertForMaskedLM(BertConfig(**SMALL)),
    "roberta": lambda: RobertaForMaskedLM(RobertaConfig(**SMALL, pad_token_id=1)),
    "distilbert": lambda: DistilBertForMaskedLM(DistilBertConfig(dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                                                                 vocab_size=60)),
    "modernbert": lambda: ModernBertForMaskedLM(ModernBertConfig(**SMALL, pad_token_id=0, bos_token_id=1,
                                                                 eos_token_id=2, cls_token_id=1, sep_token_id=2)),
    "electra": family("Electra", embedding_size=16),
    "convbert": family("ConvBert", embedding_size=16),
    "deberta-v2": family("DebertaV2"),
    "deberta": family("Deberta"),
    "albert": family("Albert", embedding_size=16),
    "mpnet": family("MPNet"),
    "esm": family("Esm", pad_token_id=1, mask_token_id=4),
    "megatron-bert": family("MegatronBert"),
    "roformer": family("RoFormer"),
    "big_bird": family("BigBird", attention_type="original_full"),
    "rembert": family("RemBert", input_embedding_size=16, output_embedding_size=16),
    "mobilebert": family("MobileBert", embedding_size=16, true_hidden_size=32, intra_bottleneck_size=32),
    "ernie": family("Ernie"),
    "data2vec-text": family("Data2VecText", pad_token_id=1),
    "xlm-roberta-xl": family("XLMRobertaXL", pad_token_id=1),
    "squeezebert": family("SqueezeBert", embedding_size=32, q_groups=1, k_groups=1, v_groups=1, post_attention_groups=1,
                          intermediate_groups=1, output_groups=1),
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
    try:  # transformers 5 builds it from a dict; 4.x from a vocab file
        tokenizer = BertTokenizer(vocab={w: i for i, w in enumerate(words)}, do_lower_case=False)
    except TypeError:
        (tmp_path / "vocab.txt").write_text("\n".join(words) + "\n")
        tokenizer = BertTokenizer(vocab_file=str(tmp_path / "vocab.txt"), do_lower_case=False)
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
    with pytest.raises(FloatingPointError, match=r"NaN/\+inf logits"):
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

    denoiser = tiny_bert_denoiser(generator=3).eval()
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


def test_tiny_bert_is_a_function_of_its_generator_alone():
    """Every weight comes from the given generator: the same seed under two different global states gives the same
    model, another seed a different one in every parameter tensor that is drawn, and the global state is untouched."""
    from mlm_dynamics.training import tiny_bert_denoiser

    models = []
    for global_seed in (0, 1):
        torch.manual_seed(global_seed)
        before = torch.random.get_rng_state()
        models.append(dict(tiny_bert_denoiser(generator=3).model.named_parameters()))
        assert torch.equal(torch.random.get_rng_state(), before)
    other = dict(tiny_bert_denoiser(generator=4).model.named_parameters())
    for name, parameter in models[0].items():
        assert torch.equal(parameter, models[1][name]), name
        drawn = parameter.dim() == 2
        assert drawn == (not torch.equal(parameter, other[name])), name


def test_other_families_fall_back_to_full_logits_exactly_with_one_warning():
    torch.manual_seed(0)
    funnel = FunnelForMaskedLM(FunnelConfig(block_sizes=[1, 1], d_model=32, n_head=2, d_head=16, d_inner=64,
                                            vocab_size=60)).eval()
    with pytest.warns(UserWarning, match="no head-only path for the 'funnel' family"):
        denoiser = MaskedLMDenoiser(funnel, mask_id=MASK_ID)
    tokens = torch.randint(5, 60, (2, 8))
    positions = torch.tensor([[1, 5], [2, 3]])
    with torch.no_grad():
        full = funnel(input_ids=tokens.scatter(1, positions, MASK_ID)).logits
    reference = full.gather(1, positions[..., None].expand(-1, -1, 60))
    torch.testing.assert_close(denoiser.conditional_logits(tokens, positions), reference)


class DiT(torch.nn.Module):
    """A masked-diffusion backbone of the MDLM shape: ``forward(x, sigma)`` returning log-probabilities."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(8, 16)
        self.time = torch.nn.Linear(1, 16)
        self.drop = torch.nn.Dropout(0.5)
        self.out = torch.nn.Linear(16, 8)
        self.sigmas: list[torch.Tensor] = []

    def forward(self, x, sigma):
        self.sigmas.append(sigma)
        h = self.drop(self.embed(x) + self.time(sigma[:, None, None].float()))
        logits = self.out(h)
        logits[..., 7] = float("-inf")  # the mask token has probability 0, as in MDLM
        return logits.log_softmax(-1)


def test_masked_diffusion_backbone_gets_the_glauber_time_and_is_registered():
    from mlm_dynamics.models.full_sequence import loglinear_sigma

    backbone = DiT()
    vocab = VocabInfo(size=8, mask_id=7, forbidden_ids=(7,))
    denoiser = FullSequenceDenoiser.masked_diffusion(backbone, vocab, time_conditioning=True).eval()
    assert not backbone.training  # eval() reached the backbone: dropout off
    tokens = torch.randint(7, (3, 10))
    first = denoiser.conditional_logits(tokens, torch.tensor([[2], [4], [6]]))
    second = denoiser.conditional_logits(tokens, torch.tensor([[2], [4], [6]]))
    torch.testing.assert_close(first, second)  # deterministic in eval mode
    expected_sigma = loglinear_sigma(torch.full((3,), 1 / 10))  # one masked position of ten
    torch.testing.assert_close(backbone.sigmas[0], expected_sigma)
    with torch.no_grad():
        direct = backbone(tokens.scatter(1, torch.tensor([[2], [4], [6]]), 7), expected_sigma)
    torch.testing.assert_close(first[:, 0, :7], direct[torch.arange(3), [2, 4, 6], :7])  # -inf at the mask id is fine
    assert denoiser.device == backbone.out.weight.device


def test_functions_have_their_modules_registered():
    torch.manual_seed(0)
    bert = BertForMaskedLM(BertConfig(**SMALL, hidden_dropout_prob=0.5))
    vocab = VocabInfo(size=60, mask_id=MASK_ID)
    denoiser = FullSequenceDenoiser(lambda z: bert(input_ids=z), vocab)  # returns a MaskedLMOutput
    assert any(p is bert.cls.predictions.bias for p in denoiser.parameters())
    denoiser.eval()
    assert not bert.training
    tokens, positions = torch.randint(5, 60, (2, 9)), torch.tensor([[3], [5]])
    torch.testing.assert_close(denoiser.conditional_logits(tokens, positions),
                               denoiser.conditional_logits(tokens, positions))
    direct = FullSequenceDenoiser(bert, vocab).conditional_logits(tokens, positions)  # the module itself
    torch.testing.assert_close(direct, denoiser.conditional_logits(tokens, positions))


REMOTE_CODE = '''
import torch
from transformers import PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import MaskedLMOutput


class TinyDiffusionConfig(PretrainedConfig):
    model_type = "tiny-diffusion-lm"

    def __init__(self, vocab_size=12, hidden_size=8, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size, self.hidden_size = vocab_size, hidden_size


class TinyDiffusionLM(PreTrainedModel):
    config_class = TinyDiffusionConfig

    def __init__(self, config):
        super().__init__(config)
        self.embed = torch.nn.Embedding(config.vocab_size, config.hidden_size)
        self.mix = torch.nn.Linear(config.hidden_size, config.hidden_size)
        self.out = torch.nn.Linear(config.hidden_size, config.vocab_size)
        self.post_init()

    def forward(self, input_ids, **kwargs):
        h = self.embed(input_ids)
        h = h + self.mix(h.mean(1, keepdim=True))
        return MaskedLMOutput(logits=self.out(h))
'''


def test_remote_code_diffusion_lm_runs_only_when_trusted(tmp_path):
    import json
    import sys

    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    (tmp_path / "modeling_tiny.py").write_text(REMOTE_CODE)
    sys.path.insert(0, str(tmp_path))
    try:
        import modeling_tiny

        model = modeling_tiny.TinyDiffusionLM(modeling_tiny.TinyDiffusionConfig())
    finally:
        sys.path.remove(str(tmp_path))
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "modeling_tiny.TinyDiffusionConfig",
                          "AutoModel": "modeling_tiny.TinyDiffusionLM"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    words = {w: i for i, w in enumerate(["[PAD]", "[MASK]", *"abcdefghij"])}
    backend = Tokenizer(models.WordLevel(words, unk_token="[PAD]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]", mask_token="[MASK]").save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="trust_remote_code=True"):
        load_diffusion_lm(str(tmp_path))
    with pytest.raises(ValueError, match="neither a known masked-diffusion family"):  # never guessed
        load_diffusion_lm(str(tmp_path), trust_remote_code=True)
    denoiser, tokenizer = load_diffusion_lm(str(tmp_path), trust_remote_code=True,
                                            family="llada")  # its conventions, named
    assert denoiser.vocab.mask_id == 1 and 1 in denoiser.vocab.forbidden_ids
    tokens = torch.tensor([tokenizer("a b c d e")["input_ids"]])
    logits = denoiser.conditional_logits(tokens, torch.tensor([[2]]))
    with torch.no_grad():
        direct = denoiser.model(tokens.scatter(1, torch.tensor([[2]]), 1)).logits[:, 2]
    allowed = denoiser.vocab.allowed_mask()
    torch.testing.assert_close(logits[0, :, allowed], direct[:, allowed])


@pytest.mark.parametrize("time_conditioning", [False, True])
def test_masked_diffusion_is_exact_against_the_generators_own_log_probabilities(time_conditioning):
    """MDLM's module gives log-probabilities ``forward(x, sigma)`` (SUBS); the denoiser built with the module's own
    ``time_conditioning`` reproduces them at the masked positions, for a backbone trained with and without time."""
    from helpers import mdlm_style_class
    from mlm_dynamics.models.full_sequence import loglinear_sigma
    from mlm_dynamics.sampling import tempered_log_probs

    torch.manual_seed(0)
    module = mdlm_style_class()(plugin=True, time_conditioning=time_conditioning).eval()
    for p in module.backbone.time.parameters():  # make the time embedding matter
        torch.nn.init.normal_(p, std=2.0)
    tokens = torch.randint(11, (3, 10))
    positions = torch.tensor([[2], [5], [9]])
    allowed = module.denoiser.vocab.allowed_mask()
    ours = tempered_log_probs(module.denoiser.conditional_logits(tokens, positions), allowed, 1.0)
    sigma = loglinear_sigma(torch.full((3,), 1 / 10))  # what an MDLM sampler passes at one masked site of ten
    with torch.no_grad():
        theirs = module(tokens.scatter(1, positions, 11), sigma).gather(1, positions[..., None].expand(-1, -1, 12))
    torch.testing.assert_close(ours[..., :11], theirs[..., :11], atol=1e-5, rtol=1e-5)
    if not time_conditioning:  # a time-conditioned adapter would feed sigma > 0 to a backbone trained on 0
        other = FullSequenceDenoiser.masked_diffusion(module.backbone, module.denoiser.vocab, time_conditioning=True)
        drifted = tempered_log_probs(other.conditional_logits(tokens, positions), allowed, 1.0)
        assert (drifted[..., :11] - theirs[..., :11]).abs().max() > 1e-2


def test_wrapping_the_model_being_trained_reads_its_ids_from_the_tokenizer_and_changes_nothing():
    from transformers import AutoTokenizer

    from mlm_dynamics.models import english_mlm_dir

    tokenizer = AutoTokenizer.from_pretrained(english_mlm_dir())
    model = BertForMaskedLM(BertConfig(**{**SMALL, "vocab_size": len(tokenizer)}))
    model.bert.embeddings.eval()
    modes = {name: m.training for name, m in model.named_modules()}
    denoiser = MaskedLMDenoiser(model, tokenizer=tokenizer)
    assert {name: m.training for name, m in model.named_modules()} == modes  # no eval(), no copy
    assert denoiser.model is model
    vocab = denoiser.vocab
    assert vocab.mask_id == tokenizer.mask_token_id and vocab.pad_id == tokenizer.pad_token_id
    assert set(vocab.frame_ids) == {tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id}
    assert set(tokenizer.all_special_ids) <= set(vocab.forbidden_ids)
    assert tokenizer.convert_tokens_to_ids("[unused0]") in vocab.forbidden_ids
    same = MaskedLMDenoiser(model, tokenizer=str(english_mlm_dir()))  # a tokenizer by path, as a config gives it
    assert same.vocab == vocab
    with pytest.raises(ValueError, match=r"mask_id: .* pass tokenizer= or mask_id="):
        MaskedLMDenoiser(model)


def test_families_that_cannot_run_head_only_fall_back_or_say_why():
    torch.manual_seed(0)
    perceiver = transformers.PerceiverForMaskedLM(transformers.PerceiverConfig(
        d_model=32, num_latents=8, d_latents=32, num_blocks=1, num_self_attends_per_block=1,
        num_self_attention_heads=2, num_cross_attention_heads=2, vocab_size=60, max_position_embeddings=64)).eval()
    with pytest.warns(UserWarning, match="'perceiver' family"):
        denoiser = MaskedLMDenoiser(perceiver, mask_id=MASK_ID)  # no output embeddings: V from the config
    tokens, positions = torch.randint(5, 60, (2, 12)), torch.tensor([[1], [7]])
    with torch.no_grad():
        full = perceiver(input_ids=tokens.scatter(1, positions, MASK_ID)).logits
    torch.testing.assert_close(denoiser.conditional_logits(tokens, positions),
                               full.gather(1, positions[..., None].expand(-1, -1, 60)))
    xmod = transformers.XmodForMaskedLM(transformers.XmodConfig(**SMALL, pad_token_id=1)).eval()
    with pytest.raises(ValueError, match="set_default_language"):
        MaskedLMDenoiser(xmod, mask_id=MASK_ID)
    xmod.set_default_language("en_XX")
    with torch.no_grad():
        full = xmod(input_ids=tokens.scatter(1, positions, MASK_ID)).logits
    torch.testing.assert_close(MaskedLMDenoiser(xmod, mask_id=MASK_ID).conditional_logits(tokens, positions),
                               full.gather(1, positions[..., None].expand(-1, -1, 60)))


def test_a_head_that_fails_on_the_first_call_falls_back_to_the_full_logits():
    torch.manual_seed(0)
    model = FAMILIES["bert"]().eval()
    denoiser = MaskedLMDenoiser(model, mask_id=MASK_ID)
    denoiser.head = None  # a family whose head moved: the head-only call breaks
    tokens, positions = torch.randint(5, 60, (2, 8)), torch.tensor([[1], [3]])
    with pytest.warns(UserWarning, match="head-only call failed"):
        logits = denoiser.conditional_logits(tokens, positions)
    with torch.no_grad():
        full = model(input_ids=tokens.scatter(1, positions, MASK_ID)).logits
    torch.testing.assert_close(logits, full.gather(1, positions[..., None].expand(-1, -1, 60)))
    assert not denoiser.head_only
