"""Real pretrained models that load offline: from registry packages, and the English MLM shipped in this package.

``load_antiberty`` loads the AntiBERTy antibody MLM (``antiberty==0.1.3``, MIT; Ruffolo, Gray & Sulam 2021) through
the ordinary ``BertForMaskedLM.from_pretrained`` path on the weights directory inside the wheel. The package's own
runner is not used: it breaks on transformers 5, and ``BertTokenizer(vocab_file=...)`` silently maps every residue to
``[UNK]`` there, so residues are encoded with :class:`ResidueCodec` instead.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from .base import available_device
from .huggingface import MaskedLMDenoiser, TextCodec, check_loaded_weights, dtype_argument

AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY"

# Real antibody variable domains: the heavy chain from the AntiBERTy README, and trastuzumab / adalimumab VH and VL.
EXAMPLE_ANTIBODIES: tuple[str, ...] = (
    "EVQLVQSGPEVKKPGTSVKVSCKASGFTFMSSAVQWVRQARGQRLEWIGWIVIGSGNTNYAQKFQERVTITRDMSTSTAYMELSSLRSEDTAVYYCAAPYCSSISCNDGFDIWGQGTMVTVS",
    "EVQLVESGGGLVQPGGSLRLSCAASGFNIKDTYIHWVRQAPGKGLEWVARIYPTNGYTRYADSVKGRFTISADTSKNTAYLQMNSLRAEDTAVYYCSRWGGDGFYAMDYWGQGTLVTVSS",
    "EVQLVESGGGLVQPGRSLRLSCAASGFTFDDYAMHWVRQAPGKGLEWVSAITWNSGHIDYADSVEGRFTISRDNAKNSLYLQMNSLRAEDTAVYYCAKVSYLSTASSLDYWGQGTLVTVSS",
    "DIQMTQSPSSLSASVGDRVTITCRASQDVNTAVAWYQQKPGKAPKLLIYSASFLYSGVPSRFSGSRSGTDFTLTISSLQPEDFATYYCQQHYTTPPTFGQGTKVEIK",
    "DIQMTQSPSSLSASVGDRVTITCRASQGIRNYLAWYQQKPGKAPKLLIYAASTLQSGVPSRFSGSGSGTDFTLTISSLQPEDVATYYCQRYNRAPYTFGQGTKVEIK",
)


class ResidueCodec:
    """Amino-acid strings <-> AntiBERTy ids: ``[PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4``, then A..Y = 5..24.

    ``encode`` wraps the sequence as ``[CLS] residues [SEP]``; ``decode`` drops special tokens.
    """

    vocabulary: tuple[str, ...] = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *AMINO_ACIDS)
    pad_id, unk_id, cls_id, sep_id, mask_id = range(5)

    def __init__(self) -> None:
        self._index = {residue: i + 5 for i, residue in enumerate(AMINO_ACIDS)}

    def encode(self, sequence: str) -> list[int]:
        """Token ids of an amino-acid sequence, framed by ``[CLS]`` and ``[SEP]``."""
        unknown = sorted(set(sequence) - set(self._index))
        if unknown:
            raise ValueError(f"sequence: residues {unknown} are not among the 20 amino acids {AMINO_ACIDS}")
        return [self.cls_id, *(self._index[r] for r in sequence), self.sep_id]

    def decode(self, ids: Sequence[int]) -> str:
        """The amino-acid sequence of ``ids`` (special tokens dropped)."""
        return "".join(self.vocabulary[i] for i in ids if i >= 5)

    def batch_encode(self, sequences: Sequence[str]) -> torch.Tensor:
        """``[B, L]`` ids for sequences of equal length."""
        lengths = {len(s) for s in sequences}
        if len(lengths) != 1:
            raise ValueError(f"sequences must have equal lengths for a batch, got {sorted(lengths)}")
        return torch.tensor([self.encode(s) for s in sequences], dtype=torch.long)


def antiberty_weights_dir() -> Path:
    """Directory of the AntiBERTy checkpoint inside the installed ``antiberty`` wheel."""
    spec = importlib.util.find_spec("antiberty")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("the bundled default model needs the 'antiberty' package: "
                                  "pip install 'mlm_dynamics[assets]'")
    return Path(spec.origin).parent / "trained_models" / "AntiBERTy_md_smooth"


def load_antiberty(device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                   num_layers: int | None = None) -> tuple[MaskedLMDenoiser, ResidueCodec]:
    """The pretrained AntiBERTy MLM as a :class:`MaskedLMDenoiser` (in eval mode) plus its residue codec.

    Args:
        num_layers: keep only the first ``num_layers`` encoder layers (a cheaper, still pretrained model for quick
            tests); ``None`` keeps all 8.
    """
    from transformers import BertForMaskedLM
    from transformers.utils import logging as hf_logging

    available_device(device)
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # the checkpoint's species/chain/graft heads are expected leftovers
    hf_logging.disable_progress_bar()
    try:
        loaded: Any = BertForMaskedLM.from_pretrained(str(antiberty_weights_dir()), output_loading_info=True,
                                                      **dtype_argument(dtype))
        model, info = loaded
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
    check_loaded_weights(model, info, str(antiberty_weights_dir()))
    if num_layers is not None:
        if not 1 <= num_layers <= len(model.bert.encoder.layer):
            raise ValueError(f"num_layers must be in [1, {len(model.bert.encoder.layer)}], got {num_layers}")
        model.bert.encoder.layer = model.bert.encoder.layer[:num_layers]
        model.config.num_hidden_layers = num_layers
    codec = ResidueCodec()
    denoiser = MaskedLMDenoiser(model.eval(), mask_id=codec.mask_id, special_ids=range(5),
                                frame_ids=(codec.pad_id, codec.cls_id, codec.sep_id), pad_id=codec.pad_id)
    return denoiser.to(device), codec


def english_mlm_dir() -> Path:
    """Directory of the English masked LM shipped with the package (``assets/english-mlm``, see its README.md)."""
    path = Path(__file__).resolve().parent.parent / "assets" / "english-mlm"
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"the bundled English MLM is not at {path}; reinstall mlm_dynamics or export one "
                                "with examples/finetune_english_mlm.py --export")
    return path


def load_english_mlm(device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
                     ) -> tuple[MaskedLMDenoiser, TextCodec]:
    """The bundled English MLM (MiniLM-L6 fine-tuned on the vendored public-domain corpus) and its codec."""
    return MaskedLMDenoiser.from_pretrained(str(english_mlm_dir()), device=device, dtype=dtype)


__all__ = ["AMINO_ACIDS", "EXAMPLE_ANTIBODIES", "ResidueCodec", "antiberty_weights_dir", "english_mlm_dir",
           "load_antiberty", "load_english_mlm"]
