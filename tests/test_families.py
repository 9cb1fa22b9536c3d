"""The masked-diffusion LM families, each as a tiny model in its own format (tests/family_models): the documented
one-line route gives conditionals equal to a softmax computed by hand from the model's own forward (shifted, padded,
block-causal and time-conditioned models included), Glauber chains, coupled pairs and the rectangle test run on
them, and each family's own decoding loop is monitored without editing it."""

import copy
import math
import warnings

import pytest
import torch

from family_models import build
from mlm_dynamics import FullSequenceDenoiser, GlauberSampler, VocabInfo, load_diffusion_lm, sample_rectangles
from mlm_dynamics.diagnostics.meeting import meeting_times
from mlm_dynamics.diagnostics.parallel import parallel_commit_error
from mlm_dynamics.models.families import FAMILIES, denoiser_for
from mlm_dynamics.models.full_sequence import loglinear_sigma
from mlm_dynamics.models.huggingface import dtype_argument
from mlm_dynamics.sampling.blocks import BlockSchedule
from mlm_dynamics.sampling.categorical import tempered_log_probs
from mlm_dynamics.sampling.coupling import randomize_sites
from mlm_dynamics.tracking.sampler_monitor import ORDER, TIE, monitor_sampler, padded_rows, sampler_denoiser

HF_FAMILIES = ("llada", "dream", "mdlm", "bd3lm")
EOS = 2


@pytest.fixture(scope="module")
def directories(tmp_path_factory):
    folder = tmp_path_factory.mktemp("families")
    return {family: build.write(family, folder) for family in HF_FAMILIES}


def attach(family, directories):
    """The documented one-line route of each family."""
    if family == "sedd":
        model = build.sedd()
        return denoiser_for(model), model
    denoiser, _ = load_diffusion_lm(str(directories[family]), trust_remote_code=True)
    return denoiser, denoiser.model


def batch(padded: bool):
    """Three rows of words; with ``padded`` the second is left-padded with EOS (LLaDA's and Dream's padding) and the
    third ends with EOS filler, a real token the chains may resample."""
    tokens = torch.randint(3, build.VOCAB - 1, (3, 10), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(3, 10, dtype=torch.bool)
    if padded:
        tokens[1, :3], mask[1, :3] = EOS, False
        tokens[2, -2:] = EOS
    return tokens, mask if padded else None


def dream_fork(dream):
    """Fast-dLLM's Dream as it ships: Dream's model under another class and model_type (`fastdllm_dream`)."""
    fork = copy.copy(dream)
    fork.__class__ = type("FastDllmDream", (type(dream),), {})
    fork.config = copy.deepcopy(dream.config)
    fork.config.model_type, fork.config.architectures = "fastdllm_dream", ["FastDllmDream"]
    return fork


def own_logits(family, model, masked, mask):
    """The logits each family's own sampler reads at every position, written out from its conventions."""
    with torch.no_grad():
        if family == "llada":
            return model(masked, attention_mask=None if mask is None else mask.long()).logits
        if family == "dream":
            if mask is None:
                logits = model(masked, "full", None).logits
            else:
                tok_idx = (mask.long().cumsum(-1) - 1).masked_fill(~mask, 1)
                full = mask[:, None, None, :] & mask[:, None, :, None]
                logits = model(masked, full, tok_idx).logits
            return torch.cat([logits[:, :1], logits[:, :-1]], dim=1)  # Dream's shift
        if family == "mdlm":
            return model(masked, timesteps=torch.zeros(len(masked))).logits
        if family == "bd3lm":
            return model(masked, timesteps=torch.zeros(len(masked)), sample_mode=True).logits
        sigma = loglinear_sigma(torch.full((len(masked),), 1 / masked.shape[1]))
        return model(masked, sigma)


@pytest.mark.parametrize("family", [*HF_FAMILIES, "sedd"])
def test_one_line_route_gives_exact_conditionals(family, directories):
    denoiser, model = attach(family, directories)
    assert denoiser.family == family
    padded = FAMILIES[family].pad_is_eos
    tokens, mask = batch(padded)
    positions = torch.tensor([[4], [6], [8]])
    ours = tempered_log_probs(denoiser.conditional_logits(tokens, positions, mask)[:, 0],
                              denoiser.vocab.allowed_mask(), 1.0)
    masked = tokens.scatter(1, positions, denoiser.vocab.mask_id)
    logits = own_logits(family, model, masked, mask).gather(1, positions[..., None].expand(-1, -1, build.VOCAB))
    allowed = denoiser.vocab.allowed_mask()
    theirs = logits[:, 0].double().masked_fill(~allowed, -math.inf).log_softmax(-1)
    difference = (ours.exp() - theirs.exp()).abs().max()
    assert difference < 1e-6, difference  # float32 forwards: equal up to rounding
    if family == "dream":  # reading the logits unshifted would be silently wrong: it differs
        unshifted = model(masked, "full" if mask is None else (mask[:, None, None, :] & mask[:, None, :, None]),
                          None if mask is None else (mask.long().cumsum(-1) - 1).masked_fill(~mask, 1)).logits
        wrong = unshifted.gather(1, positions[..., None].expand(-1, -1, build.VOCAB))[:, 0].double()
        assert (wrong.masked_fill(~allowed, -math.inf).softmax(-1) - theirs.exp()).abs().max() > 1e-3
    if padded:  # without the padding mask the padded row's conditional is another one
        blind = tempered_log_probs(denoiser.conditional_logits(tokens[1:2], positions[1:2], torch.ones(1, 10)),
                                   allowed, 1.0)
        assert (blind.exp() - ours[1:2].exp()).abs().max() > 1e-4


@pytest.mark.parametrize("family", [*HF_FAMILIES, "sedd"])
def test_glauber_coupling_and_rectangles_run_and_respect_padding(family, directories):
    denoiser, _ = attach(family, directories)
    tokens, mask = batch(FAMILIES[family].pad_is_eos)
    sampler = GlauberSampler(denoiser, 1.0)
    state = sampler.init_state(tokens, generator=0, attention_mask=mask)
    for _ in sampler.run(state, 60):
        pass
    if mask is not None:
        assert torch.equal(state.tokens[~mask], tokens[~mask])  # padding is never resampled
        sites = state.sites[2, : int(state.site_counts[2])]
        assert {8, 9} <= set(sites.tolist())  # the EOS filler of an answer is a site
    if FAMILIES[family].logit_shift:
        assert not bool((state.sites == 0).any())  # position 0 has no conditional in a shifted model
    y0 = randomize_sites(denoiser, tokens, state.sites, torch.Generator().manual_seed(0), site_counts=state.counts)
    times = meeting_times(sampler, tokens, y0, max_steps=40, generator=0, sites=state.sites,
                          site_counts=state.counts, attention_mask=mask)
    assert times.times.numel() == 3
    report = sample_rectangles(denoiser, tokens, num_tokens=2, generator=0, attention_mask=mask)
    assert report.values.numel() > 0 and bool(torch.isfinite(report.values).all())


def test_block_view_sees_what_the_block_diffusion_sampler_sees(directories):
    """BD3-LM is block-causal: block 1's conditionals ignore block 2, so the view that cuts it off is exact; on that
    view chains and rectangles stay inside the block. Across blocks, rectangles are incompatible by construction
    (block 0 does not see block 1, block 1 sees block 0): what all-positions Glauber would mix."""
    denoiser, model = attach("bd3lm", directories)
    schedule = BlockSchedule.from_model(model, start=0)
    tokens = torch.randint(3, build.VOCAB - 1, (2, 12), generator=torch.Generator().manual_seed(2))
    view = schedule.view(tokens, 1)
    sites = schedule.sites(view, 1)
    full = denoiser.conditional_logits(tokens, sites[:, :1])
    cut = denoiser.conditional_logits(view, sites[:, :1])
    torch.testing.assert_close(full, cut, atol=1e-5, rtol=1e-5)
    state = GlauberSampler(denoiser, 1.0).init_state(view, generator=0, sites=sites)
    for _ in GlauberSampler(denoiser, 1.0).run(state, 20):
        pass
    assert torch.equal(state.tokens[:, :4], view[:, :4])  # earlier blocks are context
    within = sample_rectangles(denoiser, view, num_tokens=2, sites=sites[0], generator=0)
    assert within.distances.max() <= 3
    across = sample_rectangles(denoiser, tokens[:, :8], num_tokens=2, min_distance=4, generator=0)
    assert across.prevalence >= 0.75  # 7 of 8 above the float tolerance; the eighth |R| = 8e-4 is below it


def test_native_samplers_are_monitored_without_editing_them(directories):
    """Each family's own loop, watched in a line or two: every denoising step seen, every generated position
    committed once, growth (BD3-LM) handled, the final state observed."""
    samplers = build.samplers()
    generator = torch.Generator().manual_seed(0)
    llada = attach("llada", directories)[1]
    prompt, prompt_mask = batch(True)
    trace = monitor_sampler(llada, lambda: samplers.llada_generate(
        llada, prompt, attention_mask=prompt_mask.long(), gen_length=8, block_length=4, steps=8,
        mask_id=build.MASK_ID, generator=generator))
    assert trace.steps == 8 and sum(trace.committed) == 3 * 8 and trace.final.shape == (3, 18)
    dream = attach("dream", directories)[1]
    trace = monitor_sampler(dream, lambda: dream.diffusion_generate(prompt, attention_mask=prompt_mask.long(),
                                                                    max_new_tokens=6, steps=6, generator=generator))
    assert trace.steps == 6 and sum(trace.committed) == 3 * 6
    bd3lm = attach("bd3lm", directories)[1]
    trace = monitor_sampler(bd3lm, lambda: samplers.bd3lm_sample(bd3lm, prompt[:, :4], num_blocks=2,
                                                                  steps_per_block=3, mask_id=build.MASK_ID,
                                                                  generator=generator))
    assert trace.widths == [8, 8, 8, 12, 12, 12] and sum(trace.committed) == 3 * 8
    sedd = build.sedd()
    fixed = torch.tensor([5, 6, 7])  # infilling: proj_fun keeps the first three tokens
    trace = monitor_sampler(sedd, lambda: samplers.sedd_sample(
        sedd, batch=2, length=8, steps=4, generator=generator,
        proj_fun=lambda x: torch.cat([fixed.expand(len(x), -1), x[:, 3:]], 1)))
    assert trace.steps == 4 and bool((trace.final[:, :3] == fixed).all())


def test_effective_temperature_tells_an_honest_sampler_from_a_cooled_one(directories):
    """MDLM's ancestral sampler draws committed tokens from the step's softmax: its effective temperature is the
    asked 1 (the surprisal gap's z-score within +-4, a 6e-5 false alarm rate). LLaDA's low-confidence remasking
    commits the most confident of its draws first: its committed tokens are less surprising than draws at tau = 1
    (z below -4)."""
    samplers = build.samplers()
    mdlm = attach("mdlm", directories)[1]
    honest = monitor_sampler(mdlm, lambda: samplers.mdlm_sample(mdlm, batch=48, length=12, steps=12,
                                                                 mask_id=build.MASK_ID,
                                                                 generator=torch.Generator().manual_seed(3)))
    assert abs(honest.effective["surprisal_gap_z"]) < 4, honest.effective
    llada = attach("llada", directories)[1]
    prompt = torch.randint(3, build.VOCAB - 1, (48, 4), generator=torch.Generator().manual_seed(4))
    cooled = monitor_sampler(llada, lambda: samplers.llada_generate(
        llada, prompt, gen_length=12, block_length=12, steps=4, mask_id=build.MASK_ID,
        generator=torch.Generator().manual_seed(5)))
    assert cooled.effective["surprisal_gap_z"] < -4
    assert cooled.effective.get("effective_temperature", cooled.effective.get("effective_temperature_upper_bound")) < 1


def test_models_of_no_known_family_are_refused_with_the_options(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    GPT2LMHeadModel(GPT2Config(vocab_size=20, n_embd=8, n_layer=1, n_head=2)).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="known diffusion families: llada"):
        load_diffusion_lm(str(tmp_path))
    with pytest.raises(ValueError, match="neither a known masked-diffusion family nor a masked LM"):
        denoiser_for(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="family must be one of"):
        denoiser_for(torch.nn.Linear(2, 2), family="gpt")
    uniform = build.sedd()
    uniform.config.graph.type = "uniform"
    with pytest.raises(ValueError, match="'uniform' graph has no mask state"):
        denoiser_for(uniform)


def test_remote_code_needs_consent_and_time_conditioning_is_explicit(directories):
    with pytest.raises(ValueError, match="trust_remote_code=True"):
        load_diffusion_lm(str(directories["llada"]))
    with pytest.raises(TypeError, match="time_conditioning"):
        FullSequenceDenoiser.masked_diffusion(torch.nn.Identity(), VocabInfo(size=4, mask_id=3))  # type: ignore


def test_weights_dtype_uses_the_keyword_of_this_transformers():
    import transformers
    from packaging.version import Version

    expected = "dtype" if Version(transformers.__version__) >= Version("4.56") else "torch_dtype"
    assert dtype_argument(torch.float16) == {expected: torch.float16}


def test_padded_prompts_without_an_attention_mask_are_warned_about_once_and_named_in_the_trace(directories):
    """Fast-dLLM right-pads batched prompts with EOS ([prompt, EOS, ..., EOS, mask, ...]); passed without an attention
    mask, the model attends to the padding and every conditional the watch reads is the padded row's. The watch
    says so once (left padding too) and returns the decode unchanged; with the mask passed it says nothing."""

    llada = attach("llada", directories)[1]
    samplers = build.samplers()
    prompt = torch.randint(3, build.VOCAB - 1, (3, 6), generator=torch.Generator().manual_seed(2))
    right, left = prompt.clone(), prompt.clone()
    right[1, 3:] = EOS
    left[2, :2] = EOS

    def run(tokens, mask=None):
        return lambda: samplers.llada_generate(llada, tokens, attention_mask=mask, gen_length=4, block_length=4,
                                               steps=2, mask_id=build.MASK_ID,
                                               generator=torch.Generator().manual_seed(0))

    assert padded_rows(torch.tensor([[5, EOS, build.MASK_ID], [EOS, 5, build.MASK_ID], [5, 6, build.MASK_ID]]),
                       build.MASK_ID, EOS) == ([1], [0])
    with pytest.warns(RuntimeWarning, match=r"rows \[1\] end their prompt, right before the masked region"):
        trace = monitor_sampler(llada, run(right))
    assert torch.equal(trace.final, run(right)()) and "padding id 2" in trace.padding
    with pytest.warns(RuntimeWarning, match=r"rows \[2\] start with the padding id 2"):
        monitor_sampler(llada, run(left))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        masked = monitor_sampler(llada, run(right, (right != EOS).long()))
        plain = monitor_sampler(llada, run(prompt))
    assert masked.padding is None and plain.padding is None


def test_the_monitor_refuses_what_does_not_fit_and_never_loses_the_output(directories):
    """Wrong inputs are named before the sampler runs; what only the run can show (a model never called, a batch the
    sampler doubles for classifier-free guidance) is warned about, with the sampler's output kept."""
    llada = attach("llada", directories)[1]
    prompt = torch.randint(3, build.VOCAB - 1, (2, 4), generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=f"mask_id: 99999 is not an id of the model's {build.VOCAB}-token"):
        monitor_sampler(llada, lambda: prompt, mask_id=99999)
    with pytest.raises(ValueError, match=r"run must be a callable that runs the sampler.*got Tensor"):
        monitor_sampler(llada, prompt)
    with pytest.warns(RuntimeWarning, match=r"run: the sampler returned torch\.float32 values"):
        trace = monitor_sampler(llada, lambda: prompt.float())
    assert trace.output.dtype == torch.float32 and torch.equal(trace.output, prompt.float())  # returned as it was
    with pytest.raises(ValueError, match="temperature must be the sampler's temperature, a finite number >= 0"):
        monitor_sampler(llada, lambda: prompt, temperature=-1.0)
    other = attach("llada", directories)[1]  # another instance: the sampler never calls the watched one
    samplers = build.samplers()
    with pytest.warns(RuntimeWarning, match="never called the watched model"):
        trace = monitor_sampler(other, lambda: samplers.llada_generate(
            llada, prompt, gen_length=4, block_length=4, steps=4, mask_id=build.MASK_ID))
    assert trace.steps == 0 and trace.output.shape == (2, 8) and "never called" in trace.problem

    def guided(x):  # LLaDA's classifier-free guidance: the prompt-free copy rides in the same batch
        x = torch.cat([x, torch.full((2, 4), build.MASK_ID)], 1)
        for _ in range(4):
            unconditional = x.clone()
            unconditional[:, :4] = build.MASK_ID
            logits = llada(torch.cat([x, unconditional])).logits
            cond, uncond = logits.chunk(2)
            guided_logits = uncond + 2.0 * (cond - uncond)
            masked = (x == build.MASK_ID).nonzero()[:2]
            x[masked[:, 0], masked[:, 1]] = guided_logits[masked[:, 0], masked[:, 1], :-1].argmax(-1)
        return x

    with pytest.warns(RuntimeWarning, match="run returned 2 rows where the model saw 4"):
        trace = monitor_sampler(llada, lambda: guided(prompt.clone()))
    assert trace.output.shape == (2, 8) and trace.steps == 4


def test_a_greedy_sampler_is_measured_as_what_it_is_and_a_failing_watch_keeps_the_output(directories):
    """LLaDA's default, temperature 0: every commit is its position's argmax (argmax_fraction 1), where the same
    sampler at temperature 1 commits draws that often are not; no effective temperature is made up. Watched with the
    default temperature 1, the greedy decode's 32 argmax commits, which a temperature-1 sampler makes with a tiny
    probability, are warned about once and said in the trace; the sampler drawing at temperature 1 is not. A monitor
    whose
    own observation fails mid-run stops watching (one warning) and the sampler's output comes back whole, the same
    tokens as an unwatched run."""
    from mlm_dynamics.tracking.monitor import ChainMonitor

    llada = attach("llada", directories)[1]
    samplers = build.samplers()
    prompt = torch.randint(3, build.VOCAB - 1, (4, 4), generator=torch.Generator().manual_seed(1))

    def run(temperature):
        return lambda: samplers.llada_generate(llada, prompt, gen_length=8, block_length=8, steps=4,
                                               mask_id=build.MASK_ID, temperature=temperature,
                                               generator=torch.Generator().manual_seed(0))

    greedy = monitor_sampler(llada, run(0.0), temperature=0.0)
    assert greedy.problem is None and greedy.effective == {"argmax_fraction": 1.0} and sum(greedy.committed) == 32
    with pytest.warns(RuntimeWarning, match=r"all 32 commits were their position's argmax.*pass temperature=0"):
        mistaken = monitor_sampler(llada, run(0.0))
    assert mistaken.effective["argmax_fraction"] == 1.0 and "looks greedy" in mistaken.looks_greedy
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        honest = monitor_sampler(llada, run(1.0))
    assert honest.looks_greedy is None and honest.effective["argmax_fraction"] < 1.0
    drawn = monitor_sampler(llada, run(1.0), temperature=0.0)
    assert drawn.effective["argmax_fraction"] < 1.0

    class Broken(ChainMonitor):
        def observe(self, *args, **kwargs):
            raise RuntimeError("the embedder ran out of memory")

    with pytest.warns(RuntimeWarning, match=r"the watch stopped at step \d+ \(RuntimeError: the embedder ran out"):
        trace = monitor_sampler(llada, run(1.0), Broken(lambda tokens: tokens.float(), every=1))
    assert torch.equal(trace.output, run(1.0)()) and trace.problem.startswith("the watch stopped")


def test_a_greedy_llada_decode_is_measured_against_its_sequential_greedy_decode_exactly(directories):
    """LLaDA's generate at temperature 0 (its default), 8 tokens in one step and 4 tokens a step: with parallel=True
    each step's committed tokens are compared with the sequential greedy decode from the same state, most confident
    first, written out here from the model's own forward (commit one, call the model, take the next position's
    argmax over the ids the model may draw); the counts of differing tokens are equal, and the output is the
    unwatched one's. On this tiny model some of the 8-token step's picks differ (the test is not vacuous)."""
    llada = attach("llada", directories)[1]
    allowed = denoiser_for(llada).vocab.allowed_mask()
    samplers = build.samplers()
    prompt = torch.randint(3, build.VOCAB - 1, (4, 3), generator=torch.Generator().manual_seed(1))
    differing = 0
    for steps in (1, 2):
        def run(steps=steps):
            return samplers.llada_generate(llada, prompt, gen_length=8, block_length=8, steps=steps,
                                           mask_id=build.MASK_ID, temperature=0.0)

        states = []
        handle = llada.register_forward_pre_hook(lambda module, args, seen=states: seen.append(args[0].clone()))
        try:
            final = run()
        finally:
            handle.remove()
        expected = []  # per step, per row: the tokens that differ
        with torch.no_grad():
            for t, state in enumerate(states):
                after = states[t + 1] if t + 1 < len(states) else final
                committed = (state == build.MASK_ID) & (after != build.MASK_ID)
                logits = llada(state).logits.double().masked_fill(~allowed, -math.inf)
                for row in range(len(state)):
                    positions = committed[row].nonzero().squeeze(1)
                    confidence = logits[row, positions].softmax(-1).amax(-1)
                    positions = positions[confidence.argsort(descending=True, stable=True)]
                    x = state[row].clone()
                    x[positions[0]] = after[row, positions[0]]
                    differ = 0
                    for position in positions[1:]:
                        pick = llada(x[None]).logits[0, position].double().masked_fill(~allowed, -math.inf).argmax()
                        differ += int(pick != after[row, position])
                        x[position] = pick
                    expected.append(differ)
        trace = monitor_sampler(llada, run, temperature=0.0, parallel=True, overhead=None)
        assert torch.equal(trace.final, final) and trace.parallel_problem is None and trace.looks_greedy is None
        assert trace.parallel_steps == list(range(steps))  # indices into trace.committed
        assert [step["differ"] for step in trace.parallel] == [sum(expected[4 * t:4 * t + 4]) / 4
                                                               for t in range(steps)]
        summary = trace.summary()
        assert summary["parallel_k_mean"] == 8 / steps and summary["parallel_differ_share"] == sum(expected) / 32
        assert summary["parallel_exact_match"] == sum(d == 0 for d in expected) / len(expected)  # 4 rows a step
        assert "parallel_tv_max" not in summary  # a greedy step has no law to compare
        differing += sum(expected)
    assert differing > 0


def test_a_fork_of_a_family_is_watched_with_its_conventions_from_family_or_the_denoiser(directories):
    """Fast-dLLM's Dream (`fastdllm_dream`: another class and model_type, Dream's conventions): refused without a way
    to its mask id, the error naming family=; with family="dream", or with denoiser= carrying the mask id and the
    one-position logit shift, the trace is the one of the original Dream model, the shift included (read without
    it, the same run looks like another sampler)."""
    dream = attach("dream", directories)[1]
    fork = dream_fork(dream)
    prompt, prompt_mask = batch(True)

    def run(model):
        return lambda: model.diffusion_generate(prompt, attention_mask=prompt_mask.long(), max_new_tokens=6, steps=6,
                                                generator=torch.Generator().manual_seed(0))

    with pytest.raises(ValueError, match=r"model_type 'fastdllm_dream'\) is no known diffusion family.*pass family="):
        monitor_sampler(fork, run(fork))
    original = monitor_sampler(dream, run(dream))
    named = monitor_sampler(fork, run(fork), family="dream")
    carried = monitor_sampler(fork, run(fork), denoiser=denoiser_for(fork, family="dream"))
    for trace in (named, carried):
        assert trace.committed == original.committed and trace.effective == original.effective
        assert torch.equal(trace.final, original.final)
    unshifted = monitor_sampler(fork, run(fork), mask_id=build.MASK_ID, logit_shift=0)
    assert unshifted.effective != original.effective
    with pytest.raises(ValueError, match="logit_shift: 0 disagrees with the denoiser's 1"):
        monitor_sampler(fork, run(fork), denoiser=denoiser_for(fork, family="dream"), logit_shift=0)


def test_dreams_nucleus_and_top_k_are_read_in_dreams_order(directories):
    """Dream's sample_tokens takes the nucleus of the whole law first and then its top-k; Hugging Face's order is the
    other way. On probabilities (0.4, 0.3, 0.2, 0.1) with top_k = 2 and top_p = 0.5 the two orders keep {0, 1} and
    {0}. Dream's own generate with both, watched with parallel=True, is measured in Dream's order (each step's error
    equal to parallel_commit_error with top_p_first=True, which differs from the other order on some step)."""
    from mlm_dynamics.sampling.categorical import tempered_log_probs

    logits = torch.tensor([0.4, 0.3, 0.2, 0.1]).log()
    allowed = torch.ones(4, dtype=torch.bool)
    dream_order = tempered_log_probs(logits, allowed, 1.0, top_k=2, top_p=0.5, top_p_first=True)
    hf_order = tempered_log_probs(logits, allowed, 1.0, top_k=2, top_p=0.5)
    assert torch.isfinite(dream_order).tolist() == [True, True, False, False]
    assert torch.isfinite(hf_order).tolist() == [True, False, False, False]

    model = attach("dream", directories)[1]
    prompt, prompt_mask = batch(True)
    states = []

    def run():
        return model.diffusion_generate(prompt, attention_mask=prompt_mask.long(), max_new_tokens=8, steps=4,
                                        temperature=1.0, top_p=0.6, top_k=6,
                                        generator=torch.Generator().manual_seed(0))

    handle = model.register_forward_pre_hook(lambda module, args, seen=states: seen.append(args[0].clone()))
    try:
        final = run()
    finally:
        handle.remove()
    trace = monitor_sampler(model, run, parallel=True, overhead=None, top_p=0.6, top_k=6)
    denoiser = sampler_denoiser(denoiser_for(model))
    mask = torch.cat([prompt_mask, torch.ones(3, 8, dtype=torch.bool)], 1)
    gaps = []
    for t, step in zip(trace.parallel_steps, trace.parallel, strict=True):
        after = states[t + 1] if t + 1 < len(states) else final
        committed = (states[t] == build.MASK_ID) & (after != build.MASK_ID)
        positions = committed.nonzero()[:, 1].view(3, -1)
        same = dict(orders=0, order="confidence", attention_mask=mask, top_k=6, top_p=0.6)
        ours = parallel_commit_error(denoiser, states[t], positions, top_p_first=True, **same)
        assert step["tv"] == pytest.approx(float(ours.tv.mean()), abs=1e-9)
        other = parallel_commit_error(denoiser, states[t], positions, top_p_first=False, **same)
        gaps.append(abs(float(other.tv.mean()) - step["tv"]))
    assert len(gaps) == 4 and max(gaps) > 1e-3


def test_a_logit_shift_or_family_that_contradicts_the_model_is_refused_naming_both(directories):
    """Dream shifts its logits by one; logit_shift=0 for a Dream model (named or detected) is refused naming both,
    where it used to read every position's logits at the wrong place. A fork of Dream (Fast-dLLM's `fastdllm_dream`)
    named as LLaDA is refused naming the family it forks."""
    dream = attach("dream", directories)[1]
    prompt, prompt_mask = batch(True)

    def run(model):
        return lambda: model.diffusion_generate(prompt, attention_mask=prompt_mask.long(), max_new_tokens=4, steps=4,
                                                generator=torch.Generator().manual_seed(0))

    with pytest.raises(ValueError, match=r"logit_shift: 0 contradicts the dream family's 1 \(named by family="):
        monitor_sampler(dream, run(dream), family="dream", logit_shift=0)
    with pytest.raises(ValueError, match=r"logit_shift: 0 contradicts the dream family's 1 \(detected"):
        monitor_sampler(dream, run(dream), logit_shift=0)
    fork = dream_fork(dream)
    with pytest.raises(ValueError, match=r"family: 'llada' was named, but the model is a fork of dream"):
        monitor_sampler(fork, run(fork), family="llada")


def test_right_padding_without_a_mask_is_warned_in_the_parallel_error_and_bad_positions_are_named(directories):
    """A right-padded prompt ([prompt, EOS, EOS, masked ...], as Fast-dLLM batches prompts) passed to
    parallel_commit_error without attention_mask: one warning naming the rows (the model attends to the padding).
    A position on padding given with the mask is refused naming its row, position and id."""
    denoiser = attach("llada", directories)[0]
    tokens = torch.randint(3, build.VOCAB - 1, (2, 10), generator=torch.Generator().manual_seed(5))
    tokens[1, 4:6] = EOS
    tokens[:, 6:] = build.MASK_ID
    positions = torch.tensor([[6, 7], [6, 7]])
    with pytest.warns(RuntimeWarning, match=r"rows \[1\] end their prompt, right before the masked positions, with "
                                            r"the padding id 2"):
        parallel_commit_error(denoiser, tokens, positions, orders=0)
    mask = torch.ones(2, 10, dtype=torch.bool)
    mask[1, 4:6] = False
    with pytest.raises(ValueError, match=r"positions: row 1, position 5 \(id 2\) is a frame token, padding"):
        parallel_commit_error(denoiser, tokens, torch.tensor([[6, 7], [5, 7]]), orders=0, attention_mask=mask)


def test_a_named_family_that_is_not_the_models_is_refused_naming_both(directories):
    """A Dream model read as LLaDA would lose its logit shift, LLaDA read as SEDD its mask id: refused before any
    forward, naming both families; a model of a new kind may still follow a named family (test_denoiser)."""
    with pytest.raises(ValueError, match="'llada' was named, but the model is a dream model"):
        load_diffusion_lm(str(directories["dream"]), trust_remote_code=True, family="llada")
    llada = attach("llada", directories)[1]
    with pytest.raises(ValueError, match="'sedd' was named, but the model is a llada model"):
        denoiser_for(llada, family="sedd")
    with pytest.raises(ValueError, match="'llada' was named, but the model is a sedd model"):
        denoiser_for(build.sedd(), family="llada")
    assert denoiser_for(llada, family="llada").family == "llada"


def test_the_monitor_measures_each_steps_parallel_commit_on_llada_and_dream(directories):
    """LLaDA's and Dream's own generate, unmodified, commit two positions per row per step; with parallel=True the
    monitor measures each step's committed sets: the same error as parallel_commit_error on the states the sampler
    passes through (captured by the test's own hook in a bare run with the same seed), exact at K = 2, with the
    certificate beside it."""
    samplers = build.samplers()
    prompt, prompt_mask = batch(True)
    moved = []

    def sampler(family, model):
        if family == "llada":
            return lambda: samplers.llada_generate(model, prompt, attention_mask=prompt_mask.long(), gen_length=8,
                                                   block_length=8, steps=4, mask_id=build.MASK_ID,
                                                   generator=torch.Generator().manual_seed(0))
        return lambda: model.diffusion_generate(prompt, attention_mask=prompt_mask.long(), max_new_tokens=8, steps=4,
                                                generator=torch.Generator().manual_seed(0))

    for family in ("llada", "dream"):
        model = attach(family, directories)[1]
        run = sampler(family, model)
        states = []
        handle = model.register_forward_pre_hook(lambda module, args, seen=states: seen.append(args[0].clone()))
        try:
            final = run()
        finally:
            handle.remove()
        trace = monitor_sampler(model, run, parallel=True, overhead=None)  # every step, whatever it costs
        assert torch.equal(trace.final, final)  # the measurement does not touch the sampler's randomness
        assert trace.steps == 4 and len(trace.parallel) == 4 and trace.parallel_problem is None
        denoiser = sampler_denoiser(denoiser_for(model))  # the sampler's law: every id but the mask, BOS included
        assert denoiser.vocab.forbidden_ids == (build.MASK_ID,)
        mask = torch.cat([prompt_mask, torch.ones(3, 8, dtype=torch.bool)], 1)
        for t, step in enumerate(trace.parallel):
            after = states[t + 1] if t + 1 < len(states) else final
            committed = (states[t] == build.MASK_ID) & (after != build.MASK_ID)
            assert committed.sum(1).tolist() == [2, 2, 2] and step["k"] == 2 and step["exact"] == 1
            positions = committed.nonzero()[:, 1].view(3, 2)
            expected = parallel_commit_error(denoiser, states[t], positions, orders=0, order="confidence",
                                             attention_mask=mask)
            assert step["tv"] == pytest.approx(float(expected.tv.mean()), abs=1e-9)
            chains_law = parallel_commit_error(denoiser_for(model), states[t], positions, orders=0,
                                               order="confidence", attention_mask=mask)  # BOS left out: not the law
            moved.append(abs(float(chains_law.tv.mean()) - step["tv"]))
            assert step["certificate"] == pytest.approx(float(expected.certificate.mean()), abs=1e-9)
            assert 0 <= step["first_order"] <= 1
        summary = trace.summary()
        assert summary["parallel_k_mean"] == 2 and 0 < summary["parallel_tv_max"] <= 1
        assert summary["parallel_seconds"] > 0 and trace.parallel_order == ORDER
    assert max(moved) > 1e-5  # the law without BOS, which the samplers draw, measures another error (matched to 1e-9)
    # on request, the error between the assumed order and the reversed one, as parallel_commit_error gives it
    spread = monitor_sampler(model, run, parallel=True, order_spread=True, overhead=None)
    for t, step in enumerate(spread.parallel):
        after = states[t + 1] if t + 1 < len(states) else final
        positions = ((states[t] == build.MASK_ID) & (after != build.MASK_ID)).nonzero()[:, 1].view(3, 2)
        expected = parallel_commit_error(denoiser, states[t], positions, orders=1, order="confidence",
                                         attention_mask=mask)
        assert step["order_spread_max"] == pytest.approx(float(expected.order_spread.max()), abs=1e-9)
        gaps = expected.confidence.sort(1, descending=True).values.diff(dim=1).abs()
        assert step["near_ties"] == float((gaps < TIE).any(1).double().mean())


def test_kv_cached_calls_are_placed_into_the_sequence_and_read_as_the_uncached_ones():
    """A sampler built like Fast-dLLM's: per block a full call that fills the cache, then calls on the tail from the
    block on (prefix cache) or on the block alone with replace_position (dual cache). On a model whose logits at a
    position depend on that position only, the three loops draw the same tokens; watched, they give the same trace
    (nothing overwritten, the same commits and effective temperature), where rows read position by position against
    the whole sequence would count the window's tokens as overwritten. A cached call that cannot be placed stops the
    watch with one warning, the output kept."""
    from types import SimpleNamespace

    class Local(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(6, 6, generator=torch.Generator().manual_seed(2)))

        def forward(self, input_ids, past_key_values=None, use_cache=False, replace_position=None):
            return SimpleNamespace(logits=self.weight[input_ids], past_key_values=("cache",) if use_cache else None)

    model, mask_id, prompt = Local(), 5, torch.tensor([[0, 1, 2], [3, 4, 0]])

    def generate(cache):
        x = torch.cat([prompt, torch.full((2, 8), mask_id)], 1)
        generator = torch.Generator().manual_seed(0)
        for block in range(2):
            start, end = 3 + 4 * block, 7 + 4 * block
            out = model(x, use_cache=True)
            for step in range(2):
                logits = out.logits.clone()
                if step and cache == "prefix":
                    logits[:, start:] = model(x[:, start:], past_key_values=out.past_key_values, use_cache=True).logits
                elif step and cache == "dual":
                    replace = torch.zeros(1, x.shape[1], dtype=torch.bool)
                    replace[:, start:end] = True
                    logits[:, start:end] = model(x[:, start:end], past_key_values=out.past_key_values, use_cache=True,
                                                 replace_position=replace).logits
                elif step:
                    logits = model(x).logits
                noise = torch.rand(logits.shape, generator=generator).clamp_min(1e-30)
                draws = (logits[..., :mask_id] - (-noise[..., :mask_id].log()).log()).argmax(-1)
                confidence = logits[..., :mask_id].softmax(-1).gather(-1, draws[..., None]).squeeze(-1)
                confidence = torch.where(x == mask_id, confidence, -torch.inf)
                confidence[:, :start], confidence[:, end:] = -torch.inf, -torch.inf
                chosen = confidence.topk(2, dim=1).indices
                x = x.scatter(1, chosen, draws.gather(1, chosen))
        return x

    plain = monitor_sampler(model, lambda: generate(None), mask_id=mask_id)
    assert plain.problem is None and sum(plain.overwritten) == 0 and sum(plain.committed) == 16
    for cache in ("prefix", "dual"):
        trace = monitor_sampler(model, lambda cache=cache: generate(cache), mask_id=mask_id)
        assert trace.problem is None and torch.equal(trace.final, plain.final)
        assert trace.committed == plain.committed and trace.overwritten == plain.overwritten
        assert trace.effective == pytest.approx(plain.effective)

    def unplaced():  # a cached call before the sequence was ever seen whole, and wider than it
        model(torch.full((2, 4), mask_id), use_cache=True)
        model(torch.full((2, 6), mask_id), past_key_values=("cache",))
        return prompt

    with pytest.warns(RuntimeWarning, match="a KV-cached call at step 2 on 6 positions that no earlier full call"):
        trace = monitor_sampler(model, unplaced, mask_id=mask_id)
    assert torch.equal(trace.output, prompt)


def test_a_nucleus_sampler_is_measured_against_its_truncated_law():
    """Draws from the top-p = 0.5 nucleus of each position's law: measured against the untruncated law they look like
    a cooled sampler (surprisal gap below -4 standard errors); told top_p, the monitor finds them as surprising as
    their own law makes them (gap within 4 standard errors: a z-score of an honest sampler exceeds 4 with probability
    6e-5)."""
    from mlm_dynamics.sampling.categorical import tempered_log_probs

    class Fixed(torch.nn.Module):  # each position's logits fixed, whatever the tokens
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(10, 40, generator=torch.Generator().manual_seed(4)))

        def forward(self, x):
            return self.weight[None].expand(len(x), -1, -1)

    model, mask_id = Fixed(), 39
    allowed = torch.arange(40) != mask_id

    def nucleus():
        generator, x = torch.Generator().manual_seed(0), torch.full((300, 10), mask_id)
        for k in range(10):
            law = tempered_log_probs(model(x)[:, k], allowed, 1.0, top_p=0.5).exp()
            x[:, k] = torch.multinomial(law, 1, generator=generator).squeeze(1)
        return x

    untruncated = monitor_sampler(model, nucleus, mask_id=mask_id)
    told = monitor_sampler(model, nucleus, mask_id=mask_id, top_p=0.5)
    assert untruncated.effective["surprisal_gap_z"] < -4
    assert abs(told.effective["surprisal_gap_z"]) < 4
    with pytest.raises(ValueError, match="top_p must lie in"):
        monitor_sampler(model, nucleus, mask_id=mask_id, top_p=1.5)


def test_the_parallel_measurement_stays_within_its_overhead_and_says_how_much_it_measured(monkeypatch):
    """On a fake clock (the model's forward takes 0.01 s a row, the sampler 0.05 s of its own work a step), a
    200-step loop committing two positions in each of 3 rows a step: one row's measurement (about 20 forward rows)
    costs more than two sampler steps, so at overhead=0.5 about one row in five fits. The measurement never takes
    more than half the sampler's own time but for one row's worth, measures the rows that fit (a step measures as
    many of its rows as fit), skips the steps where none does, counted; the sampler's tokens are those of the
    unwatched loop."""
    import mlm_dynamics.tracking.sampler_monitor as watched
    from mlm_dynamics.models.base import VocabInfo
    from mlm_dynamics.models.full_sequence import FullSequenceDenoiser

    clock = [0.0]
    monkeypatch.setattr(watched.time, "perf_counter", lambda: clock[0])

    class Toy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(5, 5, generator=torch.Generator().manual_seed(0)))

        def forward(self, x):
            clock[0] += 0.01 * x.shape[0]
            counts = torch.nn.functional.one_hot(x, 5).float().sum(1)
            return (counts @ self.weight)[:, None, :] + self.weight[None, :1, :] * torch.arange(x.shape[1])[:, None]

    model = Toy()

    def sample():
        x, generator = torch.full((3, 400), 4), torch.Generator().manual_seed(0)
        for k in range(0, 400, 2):
            clock[0] += 0.05
            law = model(x)[:, k:k + 2, :4].softmax(-1)
            x[:, k:k + 2] = torch.multinomial(law.flatten(0, 1), 1, generator=generator).view(3, 2)
        return x

    alone = sample()
    clock[0] = 0.0
    denoiser = FullSequenceDenoiser(model, VocabInfo(size=5, mask_id=4))
    trace = monitor_sampler(model, sample, mask_id=4, parallel=True, denoiser=denoiser, overhead=0.5)
    own = clock[0] - trace.parallel_seconds
    rows = [int(step["rows"]) for step in trace.parallel]
    assert torch.equal(trace.final, alone)
    assert trace.parallel_seconds <= 0.5 * own + 0.25  # within the budget but for one row's measurement (~0.2 s)
    assert all(1 <= r <= 3 for r in rows) and all(step["rows_of"] == 3 for step in trace.parallel)
    assert 10 <= sum(rows) < 600 and trace.parallel_skipped == 200 - len(trace.parallel)  # 200 steps, 600 rows
    assert trace.parallel_rows_total == 600 and trace.parallel_steps == sorted(trace.parallel_steps)
    assert trace.summary()["parallel_measured_share"] == sum(rows) / 600
    with pytest.raises(ValueError, match="overhead must be a fraction"):
        monitor_sampler(model, sample, mask_id=4, parallel=True, denoiser=denoiser, overhead=2.0)


def test_near_ties_in_the_commit_order_are_flagged():
    """A toy whose every position has the same law: each step's two committed positions are tied in confidence,
    so the order a sampler commits them in is a coin toss; every step says so (near_ties 1)."""
    from mlm_dynamics.models.base import VocabInfo
    from mlm_dynamics.models.full_sequence import FullSequenceDenoiser

    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(5, 5, generator=torch.Generator().manual_seed(0)))

        def forward(self, x):  # every position: the same logits, from the counts of the tokens in the row
            counts = torch.nn.functional.one_hot(x, 5).float().sum(1)
            return (counts @ self.weight)[:, None, :].expand(-1, x.shape[1], -1)

    model = Tied()

    def sample():
        x = torch.full((3, 4), 4)
        for k in (0, 2):
            logits = model(x)
            x[:, k:k + 2] = logits[:, k:k + 2, :4].argmax(-1)
        return x

    denoiser = FullSequenceDenoiser(model, VocabInfo(size=5, mask_id=4))
    trace = monitor_sampler(model, sample, mask_id=4, parallel=True, denoiser=denoiser, order_spread=True,
                            overhead=None)
    assert [step["near_ties"] for step in trace.parallel] == [1.0, 1.0]
    assert trace.summary()["parallel_near_ties"] == 1.0 and all(step["order_spread_max"] >= 0
                                                                 for step in trace.parallel)


def test_a_sampler_that_calls_forward_directly_is_watched_and_the_model_is_restored(directories):
    """bd3lms' sampler calls ``self.forward`` (no ``__call__``, so no module hook fires): the monitor wraps the forward
    itself, sees every step, and leaves the model as it was."""
    mdlm = attach("mdlm", directories)[1]

    def sample():
        x = torch.full((2, 6), build.MASK_ID)
        for k in range(6):
            logits = mdlm.forward(x, timesteps=torch.zeros(2)).logits
            x[:, k] = logits[:, k, : build.MASK_ID].argmax(-1)
        return x

    trace = monitor_sampler(mdlm, sample)
    assert trace.steps == 6 and sum(trace.committed) == 12 and trace.problem is None
    assert "forward" not in mdlm.__dict__  # the class's forward again


def test_bd3lm_attaches_in_one_line_and_its_bos_is_never_a_site(directories):
    """BD3-LM's port takes timesteps [B] (a [B, 1] sigma fails inside it) and asserts SDPA attention in sample mode:
    the one-line route gives the conditionals its own sampler reads. Block 0 starts with BOS, a frame token: the
    schedule leaves it out given the frame ids, and a chain asked to resample it is refused, naming it."""
    model = attach("bd3lm", directories)[1]
    denoiser = denoiser_for(model, build.tokenizer("bd3lm"))  # a tokenizer with BOS, as BD3-LM's GPT-2 one
    assert 1 in denoiser.vocab.frame_ids  # <bos>
    tokens = torch.randint(3, build.VOCAB - 1, (2, 8), generator=torch.Generator().manual_seed(3))
    tokens[:, 0] = 1
    with pytest.raises(ValueError, match="not enough values to unpack"):
        model(tokens, timesteps=torch.zeros(2, 1), sample_mode=True)
    schedule = BlockSchedule.from_model(model, start=0)
    sites = schedule.sites(tokens, 0, frame_ids=denoiser.vocab.frame_ids)
    assert sites.tolist() == [[1, 2, 3]] * 2
    with pytest.raises(ValueError, match="position 0 of row 0 holds a frame token"):
        GlauberSampler(denoiser, 1.0).init_state(tokens, sites=schedule.sites(tokens, 0))
    state = GlauberSampler(denoiser, 1.0).init_state(tokens, sites=sites)
    for _ in GlauberSampler(denoiser, 1.0).run(state, 10):
        pass
    assert bool((state.tokens[:, 0] == 1).all())


def test_without_a_tokenizer_the_frame_comes_from_the_config_or_a_warning(directories):
    """BD3-LM's sampler starts every sequence with BOS. Without a tokenizer the frame ids come from the config
    (``bos_token_id``), and the block schedule leaves BOS out; a config naming none is warned about once, naming the
    tokenizer, instead of a BOS silently resampled in block 0."""
    model = attach("bd3lm", directories)[1]
    with pytest.warns(RuntimeWarning, match=r"bd3lm samples start with BOS.*pass the tokenizer"):
        assert denoiser_for(model).vocab.frame_ids == ()
    model.config.bos_token_id = 1
    denoiser = denoiser_for(model)
    assert denoiser.vocab.frame_ids == (1,) and 1 in denoiser.vocab.forbidden_ids
    tokens = torch.randint(3, build.VOCAB - 1, (2, 8), generator=torch.Generator().manual_seed(3))
    tokens[:, 0] = 1
    schedule = BlockSchedule.from_model(model, start=0)
    assert schedule.sites(tokens, 0, frame_ids=denoiser.vocab.frame_ids).tolist() == [[1, 2, 3]] * 2


def test_a_model_that_refuses_the_call_is_named_with_the_call_it_got(directories):
    """BD3-LM with another attention backend asserts in sample mode without a message: the adapter names the model,
    the call and the route that passes the family's own arguments, instead of a bare AssertionError."""
    model = attach("bd3lm", directories)[1]
    model.config.attn_backend = "flex"
    with pytest.raises(RuntimeError, match=r"BD3LM refused model\(tokens \(1, 6\), sample_mode=True, timesteps=\(1,\)"
                                           r"\) with AssertionError: Sampling only supported with SDPA"):
        denoiser_for(model).conditional_logits(torch.randint(3, 30, (1, 6)), torch.tensor([[2]]))


@pytest.mark.parametrize("family", ["llada", "dream"])
def test_visible_padding_without_an_attention_mask_is_warned_about_once(family, directories):
    """LLaDA and Dream pad with EOS, a real token: a left-padded row given without attention_mask= has conditionals
    that differ from the unpadded row's. The adapter says so once; with the mask it says nothing."""
    denoiser = attach(family, directories)[0]
    tokens, mask = batch(True)
    positions = torch.tensor([[4], [6], [8]])
    with pytest.warns(RuntimeWarning, match=r"rows \[1\] start with the padding id 2"):
        denoiser.conditional_logits(tokens, positions)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        denoiser.conditional_logits(tokens, positions)  # once only
        attach(family, directories)[0].conditional_logits(tokens, positions, mask)  # the mask given: silent


def test_dreams_published_format_loads_with_its_own_from_pretrained(directories, tmp_path):
    """Dream's modeling file overrides from_pretrained and sets its generation config on what the parent class
    returns, which the loading report (output_loading_info) makes a tuple: the loader loads it as its users do and
    reads the report off the weight files, so the model comes with Dream's generation config and weights that are
    not the model's are still refused, naming the folder."""
    import shutil

    from safetensors.torch import load_file, save_file

    denoiser, _ = load_diffusion_lm(str(directories["dream"]), trust_remote_code=True)
    assert type(denoiser.model.generation_config).__name__ == "DreamGenerationConfig"
    assert denoiser.model.generation_config.alg == "entropy"
    broken = tmp_path / "dream-broken"
    shutil.copytree(directories["dream"], broken)
    weights = load_file(str(broken / "model.safetensors"))
    save_file({k: v for k, v in weights.items() if "lm_head" not in k}, str(broken / "model.safetensors"),
              metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"dream-broken.*missing from its weights.*lm_head"):
        load_diffusion_lm(str(broken), trust_remote_code=True)
