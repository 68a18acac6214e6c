"""``in_order=False`` for head-of-line blocking (:mod:`pipecheck.analysis.hol`'s finding).

The fix is ``in_order=False`` (torch >= 2.6: batches are handed over as they finish; gives up
the sampler's order) or evening out per-batch work. Its expected effect is an upper bound: the
blocked wait removed, ``stall = (wait - blocked) / (loop - blocked)``; the batches that were
ready still have to be received.
"""

from __future__ import annotations

from typing import Optional

from pipecheck.records import Expected, Finding, Recommendation


def in_order_recommendation(finding: Finding, *, wait_s: float, compute_s: float,
                            samples: int, torch_has_in_order: bool
                            ) -> Optional[Recommendation]:
    """``in_order=False`` for ``finding`` (a ``head-of-line-blocking`` one) with its upper-bound
    effect (module docstring); ``None`` when this torch has no ``in_order`` (the finding's
    message then stands alone: even out per-batch work)."""
    if not torch_has_in_order:
        return None
    blocked = finding.evidence["blocked_wait_s"]
    remaining = max(wait_s + compute_s - blocked, 1e-9)
    expected = Expected(
        samples_per_s=samples / remaining if samples else None,
        stall_fraction=max(wait_s - blocked, 0.0) / remaining,
        note="upper bound: the blocked wait removed")
    return Recommendation(
        "in_order", True, False, expected,
        f"{finding.message}. in_order=False hands batches over as workers finish them, so a "
        f"slow batch no longer holds back the ready ones (batch order then varies)")
