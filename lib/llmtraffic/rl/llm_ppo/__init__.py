"""PPO for a causal language-model policy with LoRA adapters (OracleTSC §3.2, A.2, eq. 16, Alg. 1).

Read in this order:

1. :mod:`.config`: ``PPOConfig``, every hyperparameter (Table 8 / A.2 defaults).
2. :mod:`.objective`: the math on token tensors: K3 KL, token rewards (eq. 1), GAE (eqs. 3–4),
   the clipped surrogate (eqs. 2, 16), the clipped value loss (eq. 5).
3. :mod:`.model`: ``ValueHead`` (A.2), ``load_policy_model`` (optional 4-bit NF4 base through
   bitsandbytes), and the tokens that pad and end an answer.
4. :mod:`.policy`: ``LMPolicy``, one batched ``generate`` of G answers per decision (Alg. 1, the
   first answer is the action), the buffer entry it stores (``Exchange``), the PPO update,
   checkpoints.
5. :mod:`.group`: ``PolicyGroup``, several agent seeds sampling in one batch.
"""

from .config import PPOConfig
from .group import PolicyGroup
from .model import ValueHead, disable_cpu_repacking, load_policy_model, pad_token_id, stop_token_ids, torch_threads
from .objective import (clipped_surrogate_loss, clipped_value_loss, discounted_returns, gae, k3_kl, masked_mean,
                        standardize, token_rewards)
from .policy import Exchange, LMPolicy

__all__ = ["Exchange", "LMPolicy", "PPOConfig", "PolicyGroup", "ValueHead", "clipped_surrogate_loss",
           "clipped_value_loss", "disable_cpu_repacking", "discounted_returns", "gae", "k3_kl", "load_policy_model", "masked_mean",
           "pad_token_id", "standardize", "stop_token_ids", "token_rewards", "torch_threads"]
