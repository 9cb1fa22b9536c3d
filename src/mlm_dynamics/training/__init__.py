"""Lightning modules for masked-denoising fine-tunes that expose a :class:`~mlm_dynamics.models.Denoiser`."""

from .masked_lm import MaskedDenoiserModule, tiny_bert_denoiser

__all__ = ["MaskedDenoiserModule", "tiny_bert_denoiser"]
