"""Write each family's tiny model as its users get it: a directory with config.json (and remote code where the family
ships it), safetensors weights and a tokenizer, or a plain module (SEDD)."""

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import AutoConfig, AutoModel, GenerationConfig, PreTrainedTokenizerFast

HERE = Path(__file__).resolve().parent
VOCAB = 40  # ids: 0 <unk>, 1 <bos>, 2 <eos> (also the pad id of LLaDA and Dream), 3..38 words, 39 the mask token
WORDS = [f"w{k}" for k in range(3, VOCAB - 1)]
MASK_ID = VOCAB - 1

CONFIGS = {
    "llada": {"model_type": "llada", "architectures": ["LLaDAModelLM"],
              "auto_map": {"AutoConfig": "configuration_llada.LLaDAConfig",
                           "AutoModel": "modeling_llada.LLaDAModelLM"},
              "mask_token_id": MASK_ID, "eos_token_id": 2, "pad_token_id": 2, "bos_token_id": 1},
    "dream": {"model_type": "Dream", "architectures": ["DreamModel"],
              "auto_map": {"AutoConfig": "configuration_dream.DreamConfig", "AutoModel": "modeling_dream.DreamModel"},
              "mask_token_id": MASK_ID, "eos_token_id": 2, "pad_token_id": 2, "bos_token_id": 1},
    "mdlm": {"model_type": "mdlm", "architectures": ["MDLM"],
             "auto_map": {"AutoConfig": "configuration_mdlm.MDLMConfig", "AutoModel": "modeling_mdlm.MDLM"},
             "time_conditioning": False},
    "bd3lm": {"model_type": "bd3lm", "architectures": ["BD3LM"],
              "auto_map": {"AutoConfig": "configuration_bd3lm.BD3LMConfig", "AutoModel": "modeling_bd3lm.BD3LM"},
              "block_size": 4, "time_conditioning": False},
}


def tokenizer(family: str) -> PreTrainedTokenizerFast:
    """A word-level tokenizer over ``<unk> <bos> <eos> w3 .. w38 <mask>``; LLaDA's (like the real one) has no mask
    token, the mask id being a model constant; padding is EOS."""
    vocab = {"<unk>": 0, "<bos>": 1, "<eos>": 2, **{w: k for k, w in enumerate(WORDS, start=3)}, "<mask>": MASK_ID}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    special = {"unk_token": "<unk>", "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<eos>"}
    if family == "dream":
        special["mask_token"] = "<mask>"
    return PreTrainedTokenizerFast(tokenizer_object=backend, **special)


def write(family: str, folder: Path, seed: int = 0) -> Path:
    """The model directory of ``family`` (llada, dream, mdlm, bd3lm) under ``folder``, with random weights."""
    target = folder / family
    target.mkdir(parents=True, exist_ok=True)
    for source in (HERE / family).glob("*.py"):
        shutil.copy(source, target / source.name)
    (target / "config.json").write_text(json.dumps({**CONFIGS[family], "vocab_size": VOCAB}))
    config = AutoConfig.from_pretrained(target, trust_remote_code=True)
    torch.manual_seed(seed)
    model = AutoModel.from_config(config, trust_remote_code=True)
    model.save_pretrained(target)
    if family in ("llada", "dream"):
        tokenizer(family).save_pretrained(target)
    if family == "dream":  # Dream ships one, and its from_pretrained reads it
        GenerationConfig(bos_token_id=1, eos_token_id=2, pad_token_id=2).save_pretrained(target)
    return target


def sedd(seed: int = 0) -> torch.nn.Module:
    """A tiny SEDD module (absorbing graph), as ``SEDD.from_pretrained`` returns one."""
    spec = importlib.util.spec_from_file_location("sedd_model", HERE / "sedd" / "model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["sedd_model"] = module
    spec.loader.exec_module(module)
    torch.manual_seed(seed)
    return module.SEDD(module.tiny_config(tokens=VOCAB - 1)).eval()


def samplers():
    """The families' decoding loops (``samplers.py``)."""
    spec = importlib.util.spec_from_file_location("family_samplers", HERE / "samplers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
