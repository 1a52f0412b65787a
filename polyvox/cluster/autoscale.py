"""How many engine replicas a cluster wants: Ray Serve autoscaling driven by the engines'
own signal, not by request counts.

Each replica reports, through Serve's `record_autoscaling_stats`, the streams it runs,
its limit (the streams its engine is predicted to sustain: the same adaptive limit
admission uses) and its listeners behind. Serve averages each over its look-back window
and calls `streams_policy` every control-loop period. The rule:

- demand is the streams running; a replica with listeners behind counts as full (it is
  past what it sustains, whatever its count says);
- the replicas wanted are demand / (mean limit x `TARGET_UTILIZATION`), rounded up, so a
  cluster scales up before its last free turn is taken, while the ingress still admits;
- Serve applies the bounds and delays of the autoscaling config around the policy:
  within [min_replicas, max_replicas]; up after `upscale_delay_s` (0 here: at once), down
  only once the lower target has held for `downscale_delay_s`, so a lull between calls
  does not stop a replica. Serve stops the replica it removes gracefully (its streams
  finish: GRACEFUL_STOP_SECONDS in deploy.py); the ingress routes nothing more to it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

TARGET_UTILIZATION = 0.75  # streams per stream of limit the cluster runs at, at most


def wanted_replicas(streams: Mapping[Any, float], limits: Mapping[Any, float],
                    behind: Mapping[Any, float]) -> int:
    """Replicas for the reported load (at least 1): see the module doc."""
    mean_limit = sum(limits.values()) / len(limits) if limits else 1.0
    demand = sum(max(streams.get(r, 0.0), limits.get(r, 1.0) if behind.get(r, 0.0) > 0
                     else 0.0) for r in set(streams) | set(behind))
    return max(1, math.ceil(demand / (max(1.0, mean_limit) * TARGET_UTILIZATION) - 1e-9))


def streams_policy(ctx: Any) -> tuple[int, dict[str, Any]]:
    """A Ray Serve autoscaling policy (AutoscalingPolicy.policy_function)."""
    metrics = ctx.aggregated_metrics or {}
    wanted = wanted_replicas(metrics.get("streams", {}), metrics.get("limit", {}),
                             metrics.get("behind", {}))
    return wanted, dict(ctx.policy_state or {})
