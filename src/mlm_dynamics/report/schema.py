"""The report schema: one versioned pydantic model per result file, validated on read and checked against what the
jobs write (``tests/test_schema.py``).

A model states each value's type and range (counts are integers >= 0, fractions, coverages and powers in [0, 1],
temperatures and lengths > 0, steps >= 0, every number finite) and the relations a run guarantees (a median meeting
time at most its budget and inside its interval, a censored median's lower bound at most the budget, a fit's interval
around its value, one start and one final sequence per chain). Keys a reader does not take are allowed and not
checked, so a report stays readable while it grows; the version (``artifact.version``,
:data:`~mlm_dynamics.report.artifacts.SCHEMA_VERSION`) changes when a key a reader takes changes. Reports written
before the version existed read as version 0 when they pass the same checks. The JSON Schema of each model is
published in the reference docs (``docs/reference/report-schema.md``, written by ``docs/generate.py``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from .artifacts import SCHEMA_VERSION, job_in


def _plain_number(value: Any) -> Any:
    """Refuse what pydantic's lax mode would turn into a number: booleans and strings."""
    if isinstance(value, (bool, str)):
        raise ValueError("must be a number")
    return value


Finite = Annotated[float, BeforeValidator(_plain_number), Field(allow_inf_nan=False)]
Positive = Annotated[Finite, Field(gt=0)]
NonNegative = Annotated[Finite, Field(ge=0)]
Fraction = Annotated[Finite, Field(ge=0, le=1)]
Count = Annotated[int, BeforeValidator(_plain_number), Field(ge=0, le=2**53)]
"""A count: an integer (``4`` or ``4.0``, never ``4.5``), at most 2^53 (the largest a float holds exactly)."""
Size = Annotated[int, BeforeValidator(_plain_number), Field(ge=1, le=2**53)]
Text = Annotated[str, Field(strict=True, max_length=1_000_000)]
_FRACTION: TypeAdapter[float] = TypeAdapter(Fraction)


class _Section(BaseModel):
    """A section of a report: the keys a reader takes are checked, the others kept as they are."""

    model_config = ConfigDict(extra="allow", frozen=True)


class Artifact(_Section):
    """The marker every result file carries: the job that wrote it and the schema version."""

    job: Text
    version: Count


class Environment(_Section):
    """Where a result comes from (each key optional: the provenance table shows what is there)."""

    model: Text | None = None
    weights_sha256: Text | None = None
    mlm_dynamics: Text | None = None
    date: Text | None = None
    command: Text | None = None


class Claim(_Section):
    """One of the paper's claims with its verdict and the sample it rests on."""

    name: Text
    statement: Text
    verdict: Literal["holds", "does not hold", "inconclusive"]
    sample: Text = ""
    power: Fraction | None = None


class Claims(_Section):
    """The verdicts of a run or a sweep."""

    claims: list[Claim]


class MeetingSummary(_Section):
    """Meeting times of the coupled pairs at one temperature (a run's ladder entry, a sweep's cell)."""

    temperature: Positive
    num_pairs: Size
    censored_fraction: Fraction
    budget: NonNegative | None = None
    meeting_time_median: NonNegative | None = None
    meeting_time_median_low: NonNegative | None = None
    meeting_time_median_high: NonNegative | None = None
    meeting_time_median_lower_bound: NonNegative | None = None
    meeting_time_median_confidence: Fraction | None = None
    meeting_times: list[NonNegative] | None = None
    tv_lower: Fraction | None = None
    d_lower: Fraction | None = None
    mixing_time_exceeds: NonNegative | None = None
    forgotten_by: NonNegative | None = None
    verdict: Literal["slow", "fast", "undecided"] | None = None
    pairs: Count | None = None
    look: Size | None = None

    @model_validator(mode="after")
    def _verdict_has_its_bound(self) -> MeetingSummary:
        """A slow verdict names the step it certifies beyond, a fast one the step it certifies by."""
        if self.verdict == "slow" and self.mixing_time_exceeds is None:
            raise ValueError("a slow verdict must give mixing_time_exceeds")
        if self.verdict == "fast" and self.forgotten_by is None:
            raise ValueError("a fast verdict must give forgotten_by")
        return self

    @model_validator(mode="after")
    def _within_budget(self) -> MeetingSummary:
        """A median inside its interval; the median, its lower bound and every meeting time at most the budget."""
        median, low, high = self.meeting_time_median, self.meeting_time_median_low, self.meeting_time_median_high
        if median is not None and ((low is not None and low > median) or (high is not None and high < median)):
            raise ValueError(f"meeting_time_median {median:g} must lie in its interval [{low}, {high}]")
        if self.budget is not None:
            for key in ("meeting_time_median", "meeting_time_median_lower_bound"):
                value = getattr(self, key)
                if value is not None and value > self.budget:
                    raise ValueError(f"{key} {value:g} must be at most the budget {self.budget:g}")
            if self.meeting_times and max(self.meeting_times) > self.budget:
                raise ValueError(f"meeting_times must be at most the budget {self.budget:g}, got "
                                 f"{max(self.meeting_times):g}")
        return self


class RunConfigSection(_Section):
    """The part of a run's config a reader takes."""

    temperatures: list[Positive] = Field(min_length=1)


class RunChains(_Section):
    """A run's chains: how many, how long, and (when kept) each chain's start and final sequence."""

    num_chains: Size
    num_steps: Count
    start_sequences: list[Text] | None = None
    final_sequences: list[Text] | None = None

    @model_validator(mode="after")
    def _one_per_chain(self) -> RunChains:
        for key in ("start_sequences", "final_sequences"):
            value = getattr(self, key)
            if value is not None and len(value) != self.num_chains:
                raise ValueError(f"{key} must hold one sequence per chain ({self.num_chains}), got {len(value)}")
        return self


class RunTemperature(MeetingSummary):
    """A run's entry at one temperature: its pairs' budget is always written (every value is checked against it)."""

    budget: NonNegative


class Mixing(_Section):
    """A run's meeting times, one entry per temperature."""

    by_temperature: list[RunTemperature] = Field(min_length=1)


class RunReport(_Section):
    """``report.json`` of ``mlm-dynamics run``."""

    artifact: Artifact | None = None
    config: RunConfigSection
    chains: RunChains
    mixing: Mixing
    claims: Claims | None = None
    environment: Environment = Environment()

    @model_validator(mode="after")
    def _chains_per_temperature(self) -> RunReport:
        rungs = len(self.config.temperatures)
        if self.chains.num_chains % rungs:
            raise ValueError(f"chains.num_chains {self.chains.num_chains} must be a multiple of the {rungs} "
                             "temperatures (one block of chains each)")
        return self


class Draw(_Section):
    """A sweep's drawn pair: its starts, where it met (-1: never) and its ends."""

    met_at: Annotated[int, BeforeValidator(_plain_number), Field(ge=-1)]
    x_start: Text
    y_start: Text
    x_end: Text
    y_end: Text


class SweepCell(MeetingSummary):
    """A (temperature, length) cell of a sweep: its pairs' budget is always known."""

    num_sites: Size
    budget: NonNegative
    draws: list[Draw] | None = None

    @model_validator(mode="after")
    def _met_within_budget(self) -> SweepCell:
        for draw in self.draws or []:
            if self.budget is not None and draw.met_at > self.budget:
                raise ValueError(f"draws: met_at {draw.met_at} must be at most the budget {self.budget:g}")
        return self


class Fit(_Section):
    """``C(tau)`` of a sweep's fit at one temperature, with its interval (all or none)."""

    temperature: Positive
    C: Finite | None = None
    C_low: Finite | None = None
    C_high: Finite | None = None
    note: Text | None = None

    @model_validator(mode="after")
    def _interval(self) -> Fit:
        if self.C is not None:
            if self.C_low is None or self.C_high is None:
                raise ValueError("C needs its interval C_low, C_high")
            if not self.C_low <= self.C <= self.C_high:
                raise ValueError(f"C {self.C:g} must lie in [C_low, C_high] = [{self.C_low:g}, {self.C_high:g}]")
        return self


class SlowBracket(_Section):
    """The end of a sweep's slow region at one length: the last slow and the first fast temperature."""

    num_sites: Size
    slow_up_to: NonNegative | None
    fast_from: NonNegative | None
    confidence: Fraction | None = None


class Sweep(_Section):
    """A sweep's cells, fits, slow region and claims."""

    cells: list[SweepCell] = Field(min_length=1)
    fit: list[Fit] = []
    slow_region: list[SlowBracket] = []
    claims: Claims | None = None


class SweepReport(_Section):
    """``report.json`` of ``mlm-dynamics sweep``."""

    artifact: Artifact | None = None
    sweep: Sweep
    environment: Environment = Environment()


class DecodingRow(_Section):
    """One model of the parallel-decoding job: its errors (every ``tv*`` value in [0, 1]) and allowed K."""

    model: Text

    @model_validator(mode="after")
    def _errors_are_distances(self) -> DecodingRow:
        for key, value in (self.model_extra or {}).items():
            if key.startswith("tv") and value is not None:
                try:
                    _FRACTION.validate_python(value)
                except ValidationError:
                    raise ValueError(f"{key} must be a total variation distance in [0, 1], got {value!r}") from None
        return self


class ParallelDecodingReport(_Section):
    """``report.json`` of ``mlm-dynamics parallel-decoding``."""

    artifact: Artifact | None = None
    parallel: list[DecodingRow] = Field(min_length=1)


class JobReport(_Section):
    """``report.json`` of the jobs no reader takes yet (``semantics``, ``rectangle-table``): marker and provenance."""

    artifact: Artifact | None = None
    environment: Environment = Environment()


class CompareReport(_Section):
    """``compare.json`` of ``mlm-dynamics compare``."""

    artifact: Artifact | None = None
    job: Literal["run", "sweep"]
    runs: list[Text] = Field(min_length=2)
    folders: list[Text] = Field(min_length=2)


class HeadlineRow(_Section):
    """A quantity of a history: its first and last value and where, over ``runs`` logged values."""

    metric: Text
    first: Finite
    last: Finite
    first_step: Count
    last_step: Count
    runs: Size


class History(_Section):
    """The history of one logged run."""

    source: Text
    run: Text
    headline: list[HeadlineRow]


class HistoryReport(_Section):
    """``history.json`` of ``mlm-dynamics report``: one run's history, or ``runs`` for several."""

    artifact: Artifact | None = None
    runs: list[History] | None = None
    headline: list[HeadlineRow] | None = None


SCHEMAS: dict[str, type[_Section]] = {"run": RunReport, "sweep": SweepReport,
                                      "parallel-decoding": ParallelDecodingReport, "semantics": JobReport,
                                      "rectangle-table": JobReport, "compare": CompareReport,
                                      "history": HistoryReport}
"""The model of each job's result file."""


def schema_error(error: ValidationError) -> str:
    """The first problem of a failed validation in one line: ``key.path[k] must be ..., got value`` (a relation
    between keys: ``key.path[k]: what it must be``)."""
    first = error.errors()[0]
    key = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in first["loc"]).lstrip(".")
    key = key or "the report"
    if first["type"] == "missing":
        return f"{key} is missing"
    message = first["msg"].removeprefix("Value error, ").replace(" after validation", "")
    message = re.sub(r"^\w+ should", "must", message)  # pydantic's "Input should be ..." as "key must be ..."
    if first["type"] == "value_error" and not message.startswith("must"):
        return f"{key}: {message}"
    shown = repr(first.get("input"))
    return f"{key} {message}, got {shown if len(shown) <= 60 else shown[:57] + '...'}"


def validate_report(report: Any, job: str) -> dict[str, Any]:
    """Check a parsed result file of ``job`` against its schema; a ValueError in one line naming the key. Returns
    the report as the schema reads it: every key it describes present (``None`` where optional and absent), counts as
    integers, the keys it does not describe as they were."""
    try:
        return SCHEMAS[job].model_validate(report).model_dump()
    except ValidationError as error:
        raise ValueError(schema_error(error)) from None


def read_report(path: Path, jobs: tuple[str, ...]) -> tuple[str, dict[str, Any]]:
    """Read and check a result file written by one of ``jobs``: ``(job, report)``, the report as
    :func:`validate_report` returns it. A ValueError in one line naming
    ``path`` (and the key) when the file cannot be read or parsed, was written by another job or by a newer schema
    version, or fails its schema (:data:`SCHEMAS`)."""
    try:
        report = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{path} does not exist") from None
    except (OSError, ValueError, RecursionError) as error:
        reason = "nested too deeply" if isinstance(error, RecursionError) else str(error)
        raise ValueError(f"{path} is damaged: it cannot be read as a report ({reason})") from None
    job = job_in(report)
    if job not in jobs:
        raise ValueError(f"{path} is not a {' or '.join(jobs)} report ("
                         + (f"it is a {job} report)" if job else "it carries no job marker)"))
    marker = report.get("artifact")
    version = marker.get("version") if isinstance(marker, dict) else 0
    if isinstance(version, int) and version > SCHEMA_VERSION:
        raise ValueError(f"{path} is a {job} report of schema version {version}, written by a newer mlm_dynamics; "
                         f"this one reads versions up to {SCHEMA_VERSION}: upgrade mlm_dynamics to read it")
    try:
        return job, validate_report(report, job)
    except ValueError as error:
        older = "a report from before schema versions, " if version == 0 else ""
        raise ValueError(f"{path}: {error} ({older}damaged or hand-edited?)") from None


def json_schemas() -> dict[str, dict[str, Any]]:
    """The JSON Schema of each job's result file, as published in the reference docs."""
    return {job: model.model_json_schema() for job, model in SCHEMAS.items()}


__all__ = ["SCHEMAS", "Artifact", "Claim", "Claims", "CompareReport", "DecodingRow", "Draw", "Environment", "Fit",
           "History", "HistoryReport", "JobReport", "MeetingSummary", "Mixing", "ParallelDecodingReport", "RunChains",
           "RunConfigSection", "RunReport", "RunTemperature", "SlowBracket", "Sweep", "SweepCell", "SweepReport",
           "json_schemas", "read_report", "schema_error", "validate_report"]
