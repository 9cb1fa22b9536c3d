"""Command line: ``mlm-dynamics run --config configs/antiberty-default.yaml --out runs/default``.

The ``run`` job starts Glauber chains on the configured MLM, streams their trajectory, and writes a report
(``report.json``, ``trajectory.csv``) plus a printed summary.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from pathlib import Path

import torch

from .config import build_model, load_config
from .coupling import CoupledGlauberChains, randomize_sites
from .glauber import ChainState, GlauberSampler, PseudoLogLikelihoodEnergy
from .influence import estimate_influence, mixing_time_bound
from .margin import local_margins
from .rectangle import sample_rectangles


def _start_tokens(config: dict, codec) -> torch.Tensor:
    sequences = config["chains"]["sequences"]
    if sequences is None:
        if config["model"]["source"] != "antiberty":
            raise ValueError("config: chains.sequences is required for models other than the bundled antiberty")
        from .models import EXAMPLE_ANTIBODIES

        sequences = [EXAMPLE_ANTIBODIES[0]]
    if isinstance(sequences, str) or not sequences:
        raise ValueError("config: chains.sequences must be a non-empty list of strings")
    num_chains = config["chains"]["num_chains"]
    if not isinstance(num_chains, int) or num_chains < 1:
        raise ValueError(f"config: chains.num_chains must be a positive integer, got {num_chains!r}")
    encoded = [codec.encode(s) for s in sequences]
    if len({len(e) for e in encoded}) != 1:
        raise ValueError("config: chains.sequences must encode to equal lengths (chains run as one batch)")
    return torch.tensor([encoded[c % len(encoded)] for c in range(num_chains)])


def _window_sites(denoiser, tokens: torch.Tensor, window) -> torch.Tensor:
    sites = denoiser.resampleable_sites(tokens)
    if window is None:
        return sites
    if len(window) != 2 or not 0 <= window[0] < window[1] <= sites.shape[1]:
        raise ValueError(f"config: chains.window must be [start, stop) within [0, {sites.shape[1]}], got {window}")
    return sites[:, window[0]:window[1]]


def _resumable(config: dict) -> dict:
    """The parts of a config a resumed run must share with the checkpoint (everything but the step budget)."""
    return {key: value for key, value in config.items() if key not in ("run", "coupling", "rectangle", "margins",
                                                                        "influence")}


def run_job(config: dict, out_dir: Path, *, resume: bool = False) -> dict:
    """Run the chains described by ``config``; write and return the report.

    With ``run.checkpoint_every`` the chains and the report's accumulators are saved to ``out_dir/checkpoint.pt``;
    ``resume=True`` continues from there (bit-identically) up to ``run.num_steps``.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    denoiser, codec = build_model(config["model"])
    load_seconds = time.perf_counter() - t0
    tokens = _start_tokens(config, codec).to(denoiser.device)
    sites = _window_sites(denoiser, tokens, config["chains"]["window"])
    sampler = GlauberSampler(denoiser, **config["sampler"])
    state = sampler.init_state(tokens, seed=config["chains"]["seed"], sites=sites)
    start = state.tokens.clone()
    pll = PseudoLogLikelihoodEnergy(denoiser, sites=sites)
    start_energy = pll(start)

    num_steps, record_every = config["run"]["num_steps"], config["run"]["record_every"]
    checkpoint_every, checkpoint_path = config["run"]["checkpoint_every"], out_dir / "checkpoint.pt"
    progress = {"changes": torch.zeros(sites.shape, dtype=torch.long, device=tokens.device),
                "changed_steps": torch.zeros(tokens.shape[0], device=tokens.device), "log_prob_sum": 0.0,
                "rows": []}
    if resume:
        if not checkpoint_path.exists():
            raise ValueError(f"--resume: no checkpoint at {checkpoint_path}")
        saved = torch.load(checkpoint_path, weights_only=False, map_location=tokens.device)
        if saved["config"] != _resumable(config):
            raise ValueError("--resume: the model, chains or sampler config differs from the checkpoint's")
        state, progress = ChainState.from_state_dict(saved["chains"]), saved["progress"]
        if state.step > num_steps:
            raise ValueError(f"run.num_steps {num_steps} is below the checkpoint's step {state.step}")
    rows = progress["rows"]
    first_step = state.step
    t1 = time.perf_counter()
    for record in sampler.run(state, num_steps - state.step):
        moved = record.new_tokens != record.old_tokens
        progress["changed_steps"] += moved.any(1).float()
        progress["log_prob_sum"] += float(record.log_prob.mean())
        slot = (sites[:, :, None] == record.positions[:, None, :]) & moved[:, None, :]
        progress["changes"] += slot.any(2).long()
        if record.step % record_every == 0 or record.step == num_steps:
            hamming = (state.tokens != start).sum(1)
            for chain in range(tokens.shape[0]):
                rows.append({"step": record.step, "chain": chain, "hamming_to_start": int(hamming[chain]),
                             "sequence": codec.decode(state.tokens[chain].tolist())})
        if checkpoint_every and (record.step % checkpoint_every == 0 or record.step == num_steps):
            torch.save({"config": _resumable(config), "chains": state.state_dict(), "progress": progress},
                       checkpoint_path)
    chain_seconds = time.perf_counter() - t1
    end_energy = pll(state.tokens)

    with (out_dir / "trajectory.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["step", "chain", "hamming_to_start", "sequence"])
        writer.writeheader()
        writer.writerows(rows)
    hamming = (state.tokens != start).sum(1).float()
    report = {
        "config": config,
        "model": {"vocab_size": denoiser.vocab.size, "parameters": sum(p.numel() for p in denoiser.parameters()),
                  "load_seconds": round(load_seconds, 2)},
        "chains": {
            "num_chains": tokens.shape[0], "num_sites": sites.shape[1], "num_steps": num_steps,
            "steps_per_second": round((num_steps - first_step) / max(chain_seconds, 1e-9), 3),
            "change_rate": float(progress["changed_steps"].mean() / max(num_steps, 1)),
            "mean_log_prob_of_proposal": progress["log_prob_sum"] / max(num_steps, 1),
            "hamming_to_start": {"mean": float(hamming.mean()), "max": int(hamming.max())},
            "site_change_counts": progress["changes"].sum(0).tolist(),
            "window_pll_energy": {"start_mean": float(start_energy.mean()), "end_mean": float(end_energy.mean())},
            "unique_final_sequences": len({r["sequence"] for r in rows if r["step"] == num_steps}),
            "final_sequences": [codec.decode(t.tolist()) for t in state.tokens],
        },
    }
    generator = torch.Generator(device=tokens.device).manual_seed(config["chains"]["seed"] + 1)
    if config["coupling"]["enabled"]:
        report["coupling"] = _coupling_section(sampler, start, sites, config["coupling"], generator)
    if config["rectangle"]["enabled"]:
        report["rectangle"] = _rectangle_section(denoiser, state.tokens, sites, config, generator)
    if config["margins"]["enabled"]:
        report["margins"] = _margin_section(denoiser, start, state.tokens, sites, sampler.temperature)
    if config["influence"]["enabled"]:
        report["influence"] = _influence_section(denoiser, state.tokens, sites, config["influence"], generator)
    (out_dir / "report.json").write_text(json.dumps(report, indent=2))
    return report


def _finite_or_none(value: float) -> float | None:
    """JSON has no infinity: unbounded values (censored times, no contraction) are written as null."""
    return value if math.isfinite(value) else None


def _coupling_section(sampler: GlauberSampler, start: torch.Tensor, sites: torch.Tensor, spec: dict,
                      generator: torch.Generator) -> dict:
    """Pairs from the first start sequence vs uniformly random tokens on the resampled sites."""
    pairs = spec["num_pairs"]
    x0 = start[:1].expand(pairs, -1).clone()
    pair_sites = sites[:1].expand(pairs, -1)
    y0 = randomize_sites(sampler.denoiser, x0, pair_sites, generator)
    t0 = time.perf_counter()
    chains = CoupledGlauberChains(sampler)
    seed = int(torch.randint(2**31, (1,), generator=generator, device=generator.device))
    state = chains.init_state(x0, y0, seed=seed, sites=pair_sites)
    initial_distance = (state.x.tokens != state.y).sum(1)
    result = chains.run(state, spec["max_steps"])
    grid = torch.linspace(0, spec["max_steps"], 5).long()
    return {"num_pairs": pairs, "max_steps": spec["max_steps"], "seconds": round(time.perf_counter() - t0, 2),
            "meeting_times": result.times.tolist(), "censored": result.censored.tolist(),
            "censored_fraction": result.censored_fraction,
            "median_meeting_time": _finite_or_none(float(result.quantiles(torch.tensor([0.5]))[0])),
            "hamming_between_pairs": {"start": initial_distance.tolist(),
                                      "end": (state.x.tokens != state.y).sum(1).tolist()},
            "tv_bound_between_starts": dict(zip(grid.tolist(), result.survival(grid).tolist()))}


def _rectangle_section(denoiser, tokens: torch.Tensor, sites: torch.Tensor, config: dict,
                       generator: torch.Generator) -> dict:
    spec = config["rectangle"]
    result = sample_rectangles(denoiser, tokens, pairs_per_context=spec["pairs_per_context"],
                               num_tokens=spec["num_tokens"], max_distance=spec["max_distance"],
                               temperature=config["sampler"]["temperature"], sites=sites, generator=generator)
    return {"num_rectangles": result.values.numel(), "prevalence": result.prevalence,
            "abs_r_quantiles": {str(k): v for k, v in result.quantiles().items()},
            "median_tolerance": float(result.tolerance.median())}


def _influence_section(denoiser, tokens: torch.Tensor, sites: torch.Tensor, spec: dict,
                       generator: torch.Generator) -> dict:
    """Influence among the first ``max_sites`` resampled sites (sums over those sites only: lower estimates)."""
    probed = sites[0, : spec["max_sites"]]
    estimate = estimate_influence(denoiser, tokens[: spec["num_contexts"]], temperatures=spec["temperatures"],
                                  sites=probed, replacements=spec["replacements"], generator=generator)
    return {"sites": probed.tolist(), "temperatures": estimate.temperatures.tolist(),
            "dobrushin": estimate.dobrushin.tolist(), "row_sum_max": estimate.row_sums.amax(1).tolist(),
            "tau_star": _finite_or_none(estimate.contraction_temperature()),
            "tau_star_sensitivity_bound": estimate.sensitivity_temperature(),
            "mixing_time_bound": [_finite_or_none(b)
                                  for b in mixing_time_bound(estimate.dobrushin, len(probed)).tolist()]}


def _margin_section(denoiser, start: torch.Tensor, final: torch.Tensor, sites: torch.Tensor, tau: float) -> dict:
    section = {}
    for name, tokens in (("start", start), ("final", final)):
        margins = local_margins(denoiser, tokens, sites=sites)
        section[name] = {"mean_margin": float(margins.margin.mean()), "min_margin": float(margins.margin.min()),
                         "mean_change_probability": float(margins.change_probability(tau).mean()),
                         "step_escape_bound": float(margins.step_escape_bound(tau).mean())}
    return section


def _summary(report: dict) -> str:
    chains = report["chains"]
    lines = [
        f"chains: {chains['num_chains']} x {chains['num_steps']} steps on {chains['num_sites']} sites "
        f"({chains['steps_per_second']} steps/s)",
        f"change rate per step: {chains['change_rate']:.3f}; mean log q(proposal): "
        f"{chains['mean_log_prob_of_proposal']:.3f}",
        f"Hamming distance to start: mean {chains['hamming_to_start']['mean']:.2f}, "
        f"max {chains['hamming_to_start']['max']}",
        f"window PLL energy: start {chains['window_pll_energy']['start_mean']:.3f} -> "
        f"end {chains['window_pll_energy']['end_mean']:.3f}",
        f"unique final sequences: {chains['unique_final_sequences']}",
    ]
    if "coupling" in report:
        coupling = report["coupling"]
        median = coupling["median_meeting_time"]
        lines.append(f"coupled pairs: median meeting time {'> budget' if median is None else median}, "
                     f"{coupling['censored_fraction']:.2f} censored at {coupling['max_steps']} steps; "
                     f"pair Hamming distance {coupling['hamming_between_pairs']['start']} -> "
                     f"{coupling['hamming_between_pairs']['end']}")
    if "rectangle" in report:
        rect = report["rectangle"]
        lines.append(f"rectangle test: {rect['prevalence']:.3f} of {rect['num_rectangles']} rectangles certify "
                     f"incompatibility; median |R| {rect['abs_r_quantiles']['0.5']:.3f} nats")
    if "margins" in report:
        margins = report["margins"]
        lines.append(f"local margin: start {margins['start']['mean_margin']:.2f}, final "
                     f"{margins['final']['mean_margin']:.2f} (mean change probability per site update "
                     f"{margins['final']['mean_change_probability']:.3f})")
    if "influence" in report:
        influence = report["influence"]
        pairs = ", ".join(f"tau={t:g}: {a:.2f}" for t, a in zip(influence["temperatures"], influence["dobrushin"]))
        lines.append(f"Dobrushin coefficient on {len(influence['sites'])} sites: {pairs}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mlm-dynamics", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run Glauber chains and write a mixing report")
    run.add_argument("--config", type=Path, default=None, help="YAML config (defaults: the bundled antiberty)")
    run.add_argument("--out", type=Path, default=Path("runs/default"), help="output directory")
    run.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt (run.checkpoint_every)")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config value, e.g. --set sampler.temperature=0.5")
    args = parser.parse_args(argv)
    torch.set_num_threads(min(torch.get_num_threads(), 16))
    try:
        config = load_config(args.config, args.overrides)
        report = run_job(config, args.out, resume=args.resume)
    except (ValueError, ModuleNotFoundError) as error:
        print(f"mlm-dynamics: error: {error}", file=sys.stderr)
        return 2
    print(_summary(report))
    print(f"report: {args.out / 'report.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
