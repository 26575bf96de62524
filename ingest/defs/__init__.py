"""The Dagster wiring: definitions per source kind over the shared batch step (see definitions.py)."""

import warnings

# The change-batch and silver assets use a single-run backfill policy on purpose (a range of batches in
# one run, in order: docs/operations.md); Dagster marks the parameter beta and says so once per asset
# in every process that loads the code, a warning no user of this project can act on.
warnings.filterwarnings("ignore", message=r"Parameter `backfill_policy` of function `\w+` is currently in beta")
