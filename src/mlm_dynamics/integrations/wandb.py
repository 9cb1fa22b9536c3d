"""A W&B workspace for the diagnostics, built with ``wandb-workspaces``.

    from mlm_dynamics.integrations.wandb import workspace
    workspace("my-entity", "my-project").save()          # online: creates the saved view

One section per metric group (mixing, incompatibility, influence, drift, traps), opened in that order, with line
plots of the headline quantities against the trainer's step (:func:`~mlm_dynamics.probes.keys.headline_keys`);
options that multiply a key (temperatures, thresholds, topics) are drawn with a regular expression over the logged
names. The Lightning callbacks define the step axis themselves when fit starts (``define_metric``); runs of the
Hugging Face ``Trainer`` log under its ``train/`` prefix against ``train/global_step``:
``workspace(entity, project, prefix="train/", x="train/global_step")``.

What each section shows, and how a healthy and a trapped run differ, is in the documentation's "W&B, TensorBoard,
MLflow, CSV" guide.
"""

from __future__ import annotations

from typing import Any

from ..probes.base import STAGES
from ..probes.keys import headline_keys, key_regex


def panel_specs(prefix: str = "", stage: str = "train") -> dict[str, list[dict[str, Any]]]:
    """Per section title, the line plots as plain data: ``{"title", "y": [keys]}`` for fixed keys, or
    ``{"title", "metric_regex"}`` for one whose name has an option in it (every temperature, threshold, topic). A
    censored quantile shares the panel of its value: ``y`` holds both ``..._median`` and ``..._median_lower_bound``,
    of which a run logs one at each step. A ValueError names ``prefix`` or ``stage`` when they cannot match
    logged keys (a prefix that is not a string; a stage other than train, val, predict)."""
    if not isinstance(prefix, str):
        raise ValueError(f"prefix must be a string ('' for the Lightning callbacks, 'train/' for the Hugging Face "
                         f"Trainer), got {prefix!r}")
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {STAGES} (the callbacks' stage names, lower case), got {stage!r}")
    specs: dict[str, list[dict[str, Any]]] = {}
    for title, keys in headline_keys(prefix, stage).items():
        panels: list[dict[str, Any]] = []
        for key in keys:
            name = key[len(prefix):].split("/", 2)[2]  # after {group}/{stage}/
            if "{" in key:
                panels.append({"title": name, "metric_regex": f"^{key_regex(key)}$"})
            elif key.endswith("_lower_bound") and panels and panels[-1].get("y") == [key.removesuffix("_lower_bound")]:
                panels[-1]["y"].append(key)
            else:
                panels.append({"title": name, "y": [key]})
        specs[title] = panels
    return specs


def workspace(entity: str, project: str, *, name: str = "mlm_dynamics diagnostics", prefix: str = "",
              stage: str = "train", x: str = "trainer/global_step") -> Any:
    """A ``wandb_workspaces.workspaces.Workspace`` with the diagnostics' sections (not saved: call ``.save()``
    online). ``prefix``: what the logger puts before the callbacks' keys; ``stage``: ``train`` (runs every N steps)
    or ``val`` (at validation end); ``x``: the step key of the x axis. A ValueError names the argument that is
    empty or of the wrong kind, before anything is built."""
    for argument, value in (("entity", entity), ("project", project), ("x", x)):
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{argument} must be a non-empty string (the W&B {argument}"
                             f"{' key of the step axis' if argument == 'x' else ''}), got {value!r}")
    specs = panel_specs(prefix, stage)
    import wandb_workspaces.reports.v2 as wr
    import wandb_workspaces.workspaces as ws

    sections = []
    for title, panels in specs.items():
        plots: list[Any] = [wr.LinePlot(title=panel["title"], x=x, y=panel.get("y", []),
                                        metric_regex=panel.get("metric_regex")) for panel in panels]
        sections.append(ws.Section(name=title, panels=plots, is_open=True))
    return ws.Workspace(entity=entity, project=project, name=name, sections=sections)


__all__ = ["panel_specs", "workspace"]
