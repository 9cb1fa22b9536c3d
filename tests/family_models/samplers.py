"""Each family's own decoding loop, written from its description, for the monitor tests to watch unmodified."""

import itertools
import math

import torch


@torch.no_grad()
def llada_generate(model, prompt, *, gen_length, block_length, steps, mask_id, attention_mask=None,
                   temperature=1.0, generator=None):
    """LLaDA's semi-autoregressive low-confidence remasking: blocks of ``block_length`` left to right; in each step
    every masked position of the current block draws a token (Gumbel-max at ``temperature``) and the most confident
    draws are committed, ``gen_length / steps`` per step."""
    x = torch.nn.functional.pad(prompt, (0, gen_length), value=mask_id)
    if attention_mask is not None:
        attention_mask = torch.nn.functional.pad(attention_mask, (0, gen_length), value=1)
    start, per_block = prompt.shape[1], steps // (gen_length // block_length)
    for block in range(gen_length // block_length):
        end = start + (block + 1) * block_length
        for step in range(per_block):
            masked = x == mask_id
            logits = model(x, attention_mask=attention_mask).logits
            noise = torch.rand(logits.shape, generator=generator, dtype=torch.float64).clamp_min(1e-30)
            draws = (logits.double() - temperature * (-noise.log()).log()).argmax(-1)
            confidence = logits.softmax(-1).gather(-1, draws[..., None]).squeeze(-1)
            confidence = torch.where(masked, confidence, -torch.inf)
            confidence[:, end:] = -torch.inf
            left = int(masked[:, :end].sum(1).max())
            count = math.ceil(left / (per_block - step))
            chosen = confidence.topk(count, dim=1).indices
            commit = torch.zeros_like(masked).scatter(1, chosen, True) & masked
            commit[:, end:] = False
            x = torch.where(commit, draws, x)
    return x


@torch.no_grad()
def mdlm_sample(model, *, batch, length, steps, mask_id, time_conditioning=False, eps=1e-5, generator=None):
    """MDLM's ancestral sampler (log-linear schedule): from all-mask, at step t -> s each masked position is revealed
    with probability (t - s) / t, drawn from the denoiser's softmax without the mask id."""
    x = torch.full((batch, length), mask_id)
    times = torch.linspace(1, eps, steps + 1)
    for t, s in itertools.pairwise(times):
        sigma = -torch.log1p(-(1 - 1e-3) * t).expand(batch) if time_conditioning else torch.zeros(batch)
        logits = model(x, timesteps=sigma).logits
        logits[..., mask_id] = -torch.inf
        draws = torch.multinomial(logits.softmax(-1).flatten(0, 1), 1, generator=generator).view(x.shape)
        reveal = torch.rand(x.shape, generator=generator) < (t - s) / t
        x = torch.where((x == mask_id) & reveal, draws, x)
    logits = model(x, timesteps=torch.zeros(batch)).logits
    logits[..., mask_id] = -torch.inf
    return torch.where(x == mask_id, logits.argmax(-1), x)


@torch.no_grad()
def bd3lm_sample(model, prompt, *, num_blocks, steps_per_block, mask_id, generator=None):
    """BD3-LM's semi-autoregressive sampler: the sequence grows one block at a time; inside the new block masked
    positions are revealed over ``steps_per_block`` steps, the model in ``sample_mode`` (block-causal)."""
    x, size = prompt, model.config.block_size
    timesteps = torch.zeros(prompt.shape[0])
    for _ in range(num_blocks):
        x = torch.cat([x, torch.full((x.shape[0], size), mask_id)], dim=1)
        for step in range(steps_per_block):
            logits = model(x, timesteps=timesteps, sample_mode=True).logits[:, -size:]
            logits[..., mask_id] = -torch.inf
            draws = torch.multinomial(logits.softmax(-1).flatten(0, 1), 1, generator=generator).view(-1, size)
            block = x[:, -size:]
            reveal = torch.rand(block.shape, generator=generator) < 1 / (steps_per_block - step)
            x = torch.cat([x[:, :-size], torch.where((block == mask_id) & reveal, draws, block)], dim=1)
    return x


@torch.no_grad()
def sedd_sample(model, *, batch, length, steps, proj_fun=lambda x: x, generator=None):
    """SEDD's absorbing-state sampler: from all-absorbing, each step reveals masked positions with probability
    1 / (steps left), drawing from the normalised scores; ``proj_fun`` (infilling) projects every state."""
    absorb = model.config.tokens
    x = proj_fun(torch.full((batch, length), absorb))
    for step in range(steps):
        sigma = -torch.log1p(-(1 - 1e-3) * torch.full((batch,), 1 - step / steps))
        score = model(x, sigma)[..., :absorb]
        draws = torch.multinomial(score.softmax(-1).flatten(0, 1), 1, generator=generator).view(x.shape)
        reveal = torch.rand(x.shape, generator=generator) < 1 / (steps - step)
        x = proj_fun(torch.where((x == absorb) & reveal, draws, x))
    return x
