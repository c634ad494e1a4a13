"""The PPO objective on token tensors (OracleTSC §3.2, A.2): K3 KL, token rewards (eq. 1),
GAE (eqs. 3–4), the clipped surrogate (eqs. 2, 16) and the clipped value loss (eq. 5).

Each decision is an independent exchange (§3.2): GAE runs over the tokens of one answer and the
decision's reward sits on its last token; nothing is propagated across decisions.
"""

from __future__ import annotations

import torch
from torch import Tensor


def k3_kl(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Per-token K3 estimate of KL(pi_theta || pi_ref) at the sampled tokens (A.2).

    With r = pi_ref / pi_theta: k3 = r - log r - 1 >= 0, and 0 where the two agree. A.2 writes
    the ratio as p/q; with samples drawn from pi_theta, q/p is the unbiased K3 (Schulman's
    "Approximating KL divergence"); both are >= 0 and vanish together.
    """
    log_r = ref_logp - logp
    return torch.exp(log_r) - log_r - 1


def token_rewards(final_reward: float, logp: Tensor, ref_logp: Tensor, beta: float) -> Tensor:
    """Eq. 1: -beta * KL on every generated token, plus the decision reward on the last one."""
    rewards = -beta * k3_kl(logp, ref_logp)
    rewards[-1] = rewards[-1] + final_reward
    return rewards


def gae(rewards: Tensor, values: Tensor, gamma: float, lam: float) -> tuple[Tensor, Tensor]:
    """Eqs. 3–4 over one answer: advantages and returns G_l = A_l + V(s_l), with V(s_{O+1}) = 0."""
    advantages = torch.zeros_like(rewards)
    next_value, running = 0.0, 0.0
    for t in reversed(range(len(rewards))):
        delta = rewards[t] + gamma * next_value - values[t]
        running = delta + gamma * lam * running
        advantages[t] = running
        next_value = values[t]
    return advantages, advantages + values


def discounted_returns(rewards: Tensor, gamma: float) -> Tensor:
    """Monte-Carlo token returns, the REINFORCE advantages when there is no critic (Table 7)."""
    returns = torch.zeros_like(rewards)
    running = 0.0
    for t in reversed(range(len(rewards))):
        running = rewards[t] + gamma * running
        returns[t] = running
    return returns


def masked_mean(x: Tensor, mask: Tensor, count: Tensor | float | None = None) -> Tensor:
    """Mean over the unmasked entries; with ``count``, their sum over ``count`` tokens (a micro-batch's
    share of a minibatch mean: the shares of its micro-batches add up to the minibatch's mean)."""
    return (x * mask).sum() / (mask.sum().clamp(min=1) if count is None else count)


def standardize(x: Tensor, mask: Tensor) -> Tensor:
    """Zero mean, unit variance over the unmasked entries (Alg. 1 standardises per batch)."""
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    return (x - mean) * torch.rsqrt(var + 1e-8) * mask


def clipped_surrogate_loss(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, clip_low: float, clip_high: float, mask: Tensor,
    count: Tensor | float | None = None,
) -> Tensor:
    """-J_CLIP of eq. 16: ratio clipped to [1 - eps_l, 1 + eps_u], averaged over tokens (over
    ``count`` tokens where given, see :func:`masked_mean`)."""
    ratio = torch.exp(logp - old_logp)
    clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    return -masked_mean(torch.minimum(ratio * advantages, clipped * advantages), mask, count)


def clipped_value_loss(values: Tensor, old_values: Tensor, returns: Tensor, value_clip: float, mask: Tensor,
                       count: Tensor | float | None = None) -> Tensor:
    """J_value of eq. 5 in the usual PPO form: the new value may move at most eps_v from the
    rollout's value before the loss stops rewarding the move.

    Eq. 5 as printed clips V - G itself, whose square never exceeds the unclipped one, so the
    max would be the plain squared error; clipping around the old value is what PPO
    implementations (and the cited stabilisation) do.
    """
    moved = old_values + torch.clamp(values - old_values, -value_clip, value_clip)
    return 0.5 * masked_mean(torch.maximum((values - returns) ** 2, (moved - returns) ** 2), mask, count)
