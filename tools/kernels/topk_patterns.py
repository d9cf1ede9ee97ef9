"""Index patterns for timing sparse decode: what a top-k selector hands the attention kernel.

Two patterns, both ``[rows, topk]`` int32 positions, each row inside its own context
``[0, context)`` (the caller adds the row's base slot in the cache), all valid, distinct within a
row, sorted by position, deterministic from a seed:

- ``uniform_rows``: ``topk`` positions drawn uniformly without replacement from the context. This is
  what the reference engine's lightning indexer selects with random weights and random index keys:
  its scores are independent across positions (no two neighbouring keys are alike, nothing favours
  recent tokens), so ``torch.topk`` over them is a uniformly random subset.
- ``clustered_rows``: the locality of a trained selector, whose scores are smooth along the sequence
  (neighbouring compressed tokens come from overlapping windows of similar hidden states) and high
  for recent tokens. Drawn in three parts:
  1. a sliding-window block: the ``window`` most recent positions (default ``topk // 8``), always
     chosen;
  2. runs of neighbouring positions: ``runs`` run starts at a recency-biased distance from the
     window (exponential, mean ``context / 4``, clipped into the context), each of geometric length
     (mean ``mean_run``, at least 1); every position of a run gets the run's random priority;
  3. scattered singles: positions no run covers get a priority below every run's.
  The row is the ``topk`` highest priorities (window first, then whole runs in priority order, the
  last run cut where the row is full, then singles if runs did not cover enough), so the row holds
  exactly ``topk`` distinct positions. With the defaults about twice ``topk`` positions are covered
  by runs, so singles are rare and the mean run length of a row is about ``mean_run``.

Rows are sorted by position: a radix-select top-k writes its winners in scan order; a selector that
returns them by score would interleave the runs (not measured here).
"""

from __future__ import annotations

import math

import torch

MEAN_RUN = 16  # positions in a run, on average (geometric)
RECENCY_MEAN = 0.25  # a run's distance behind the window, on average, as a fraction of the context
RUN_COVER = 2.0  # positions covered by runs per position to fill outside the window


def _generator(seed: int, device: torch.device) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def uniform_rows(rows: int, topk: int, context: int, seed: int, device="cpu") -> torch.Tensor:
    """``rows`` x ``topk`` distinct positions drawn uniformly from ``[0, context)``, sorted a row."""
    if topk > context:
        raise ValueError(f"topk {topk} exceeds the context {context}")
    device = torch.device(device)
    keys = torch.rand(rows, context, generator=_generator(seed, device), device=device)
    return keys.topk(topk, dim=1).indices.sort(dim=1).values.to(torch.int32)


def clustered_rows(rows: int, topk: int, context: int, seed: int, device="cpu", *, window: int | None = None,
                   mean_run: int = MEAN_RUN) -> torch.Tensor:  # fmt: skip
    """``rows`` x ``topk`` distinct positions of ``[0, context)`` with a top-k selector's locality (see
    the module docstring), sorted a row."""
    if topk > context:
        raise ValueError(f"topk {topk} exceeds the context {context}")
    device = torch.device(device)
    gen = _generator(seed, device)
    window = topk // 8 if window is None else window
    window = max(0, min(window, topk))
    older = context - window  # positions behind the window
    n_runs = max(1, math.ceil(RUN_COVER * (topk - window) / mean_run))
    # Priorities: window 3, runs in (1, 2), singles in (0, 1).
    prio = torch.rand(rows, context, generator=gen, device=device)
    if older > 0:
        dist = -torch.log1p(-torch.rand(rows, n_runs, generator=gen, device=device)) * (RECENCY_MEAN * context)
        start = (older - 1 - dist.floor().long()).clamp(min=0)
        p = 1.0 / mean_run
        length = (torch.log1p(-torch.rand(rows, n_runs, generator=gen, device=device)) / math.log1p(-p)).floor().long() + 1
        length = length.clamp(max=8 * mean_run)
        run_prio = 1.0 + torch.rand(rows, n_runs, generator=gen, device=device) * 0.999
        offs = torch.arange(8 * mean_run, device=device)
        pos = start[:, :, None] + offs[None, None, :]
        inside = (offs[None, None, :] < length[:, :, None]) & (pos < older)
        pos = torch.where(inside, pos, torch.zeros_like(pos))
        vals = torch.where(inside, run_prio[:, :, None].expand_as(pos), torch.zeros(1, device=device))
        prio.scatter_reduce_(1, pos.reshape(rows, -1), vals.reshape(rows, -1), reduce="amax")
    prio[:, older:] = 3.0
    return prio.topk(topk, dim=1).indices.sort(dim=1).values.to(torch.int32)


def run_lengths(row: torch.Tensor) -> torch.Tensor:
    """Lengths of the runs of consecutive positions in one sorted row."""
    row = row.long()
    breaks = torch.nonzero(row[1:] != row[:-1] + 1).flatten() + 1
    edges = torch.cat([torch.zeros(1, dtype=torch.long), breaks.cpu(), torch.tensor([row.numel()])])
    return edges[1:] - edges[:-1]


PATTERNS = {"uniform": uniform_rows, "clustered": clustered_rows}
