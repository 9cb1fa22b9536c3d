"""Models behind the one protocol: :class:`Denoiser` (tokens ``[B, L]`` x positions ``[B, K]`` -> logits ``[B, K, V]``).

- :mod:`.base`: the protocol and :class:`VocabInfo`;
- :mod:`.huggingface`: Hugging Face masked LMs with the head applied at the asked positions only;
- :mod:`.full_sequence`: any model returning full-sequence logits (masked-diffusion denoisers);
- :mod:`.families`: the masked-diffusion LM families (LLaDA, Dream, MDLM, BD3-LM, SEDD) and their exact adapters;
- :mod:`.toy`: pairwise MRFs with exact conditionals, for validation (their exact Glauber kernels are in
  :mod:`mlm_dynamics.sampling.exact`);
- :mod:`.pretrained`: real weights that load offline from registry packages (AntiBERTy).
"""

from .base import Denoiser, VocabInfo, mask_positions
from .families import FAMILIES, denoiser_for
from .full_sequence import FullSequenceDenoiser
from .huggingface import MaskedLMDenoiser, TextCodec
from .pretrained import (
                         AMINO_ACIDS,
                         EXAMPLE_ANTIBODIES,
                         ResidueCodec,
                         antiberty_weights_dir,
                         english_mlm_dir,
                         load_antiberty,
                         load_english_mlm,
)
from .toy import PairwiseMRFDenoiser, enumerate_states

__all__ = ["AMINO_ACIDS", "EXAMPLE_ANTIBODIES", "FAMILIES", "Denoiser", "FullSequenceDenoiser", "MaskedLMDenoiser",
           "PairwiseMRFDenoiser", "ResidueCodec", "TextCodec", "VocabInfo", "antiberty_weights_dir",
           "denoiser_for", "english_mlm_dir", "enumerate_states", "load_antiberty", "load_english_mlm",
           "mask_positions"]
