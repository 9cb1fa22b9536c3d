"""Jobs as library functions with typed configs; the CLI is a thin shell around them."""

from .checkpoint import CheckpointError, OutputLock, RunInterrupted, load_checkpoint, save_checkpoint
from .config import ConfigError, RunConfig, load_config
from .run import ChainRunResult, run_chains

__all__ = ["ChainRunResult", "CheckpointError", "ConfigError", "OutputLock", "RunConfig", "RunInterrupted",
           "load_checkpoint", "load_config", "run_chains", "save_checkpoint"]
