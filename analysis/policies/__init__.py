"""Bandit policies of NCCL-BOT (paper appendix C), vectorised over many bandits at once.

Every policy works on a :class:`~.estimators.BanditState` of ``B`` independent bandits
(one per context and seed) and has three hooks, called by the replay engine once per step
``t = 1..T``:

* ``init(state)`` once: warm start and policy arrays;
* ``select(state, t, u, z) -> arms[B]`` with ``u`` ``[B, n_uniform]`` uniforms in [0, 1) and
  ``z`` ``[B, n_normal]`` standard normals drawn by the engine (see :func:`draw_counts`);
* ``update(state, rows, arms, reward)`` with the learned pulls only (skip-first-k applied).

Shared conventions (the plugin must match them bit for bit in float64):

* Arms are on NCCL's scan order (algorithm index, then protocol index); every ``argmax`` or
  ``argmin`` tie goes to the **lowest arm index**, and "unpulled arms first" in
  deterministic policies also takes the lowest index (the paper draws them at random; a
  fixed order keeps UCB-family policies deterministic, so every rank agrees).
* Reward ``r = mu_hat_min / X`` with ``mu_hat_min`` the smallest prediction among measured
  arms; arm filter ``predicted <= rho_max * mu_hat_min`` (undefined predictions kept).
* Warm start: ``mu_a = mu_hat_min / mu_hat(a)`` with ``n_a = nu`` virtual pulls for
  mean-based policies; cumulative losses ``L_a = nu * (1 - r_a)`` for loss-based ones.
* Adaptive observed max (``estimator.observed_max``, off by default; not in the plugin):
  the engines divide each learned reward by its running maximum before the policy's update
  (:meth:`.estimators.BanditState.renormalise`).

**UCB1** (featured policy; defaults are the paper's champion, Table 16), all float64:

* start: for every offered arm with a prediction ``mu_a = mu_hat_min / mu_hat(a)``,
  ``n_a = 2.89``; offered arms without a prediction ``mu_a = 0``, ``n_a = 0``;
* select: if some offered arm has ``n_a == 0`` play the lowest-index one; else play the
  lowest index maximising the UCB index (``alpha = 0.0928``). How ``N`` is summed and the
  index evaluated, in float64 and in which order, is written once, in ``plugin/README.md``
  ("UCB1's N is one formula"; :func:`.base.total_n`, :meth:`UCB1.index`);
* update with latency ``X`` (us): ``r = mu_hat_min / X``; ``n_a <- n_a + 1``;
  if the old ``n_a`` was 0 then ``mu_a = r``, else ``s = 0.468 * pow(min(n_a, 1024), -0.467)``
  (new ``n_a``), ``d = min(max(r - mu_a, -0.389), 0.389)``, ``mu_a <- mu_a + s * d``.

``ln`` is the C library's ``log`` (``math.log``, once per distinct ``N``: :func:`.base.log_n`) and
``pow`` numpy's float64 ``power`` (libm-compatible for these inputs).
The reward is ``mu_hat_min / X`` with no cap, here and in the plugin, for a usable latency
only: one that is not positive and finite gives no reward and is not counted
(``plugin/README.md``, "A reward needs a usable latency"; :meth:`StepPolicy.update`).
**Greedy** is ``EpsilonGreedy(eps=0)``: start as above with ``n_a = 0.892`` and the
constant-gain mean ``mu_a <- mu_a + 0.1 (r - mu_a)``; play the lowest index maximising ``mu_a``
(no unpulled-first rule: with ``nu = 0`` an unpulled arm is played only on a tie).

**The first-use transient** (an arm's first calls in a process carry NCCL's lazy connection
set-up): greedy, Softmax and Gaussian Thompson learn with the constant-gain mean, UCB1 with
its clipped SGD (a sample moves the mean by at most ``step * 0.389``) and ETC skips each arm's
first reward and commits after two learned ones (the champion's one commits on a single
transient-inflated sample live: 7.3% selection TRLT on the simulated 8-node campaign against
4.3% with two, and AUTO's 6.4%; the delayed replay rates the two alike). The delayed offline replay with the perf binary's warm-up kept
(``docs/architecture.md`` section 6, "Live rules") chose these over skip-first-1 and the
sample mean, family by family; the plugin's defaults are the same.

**Two rules every learner of the plugin keeps** (``safety_gate``, ``probe``):

* the hold rule (:func:`.base.held`, on for UCB1 and ETC: ``probe = 1``): while rewards are
  pending (the plugin's synchronisation rounds; a delayed replay), an arm other than AUTO's with
  at least ``probe + 2 * resolved`` pulls pending is left out of the choice, so a newly tried arm
  is played ``probe`` times and then waits for its rewards; with no reward pending (the plain
  replay) nothing is held;
* the safety gate (:func:`.base.safety_gate`, on by default for UCB1, greedy/eps-greedy,
  Softmax, Gaussian Thompson and ETC, margin 0.1): AUTO's arm is played where the chosen arm's
  mean is below ``(1 - margin)`` times AUTO's arm's, the chosen arm having ``gate_min`` (10)
  learned rewards, past the first-use transient, and AUTO's arm one.

**The plugin's live policies** (``NCCLBOT_POLICY``; defaults are these families' champion
defaults) are these families driven one call at a time, which is :class:`StepPolicy`:
``greedy``/``eps-greedy`` = :class:`EpsilonGreedy`, ``ucb1`` = :class:`UCB1`, ``softmax`` =
:class:`Softmax`, ``thompson`` = :class:`GaussianThompson`, ``etc`` = :class:`ETC` (two
learned samples per arm, the first of each skipped, explored in uniformly random order,
then committed to the best mean). Their draws come from the counter-based generator of
:mod:`.counter_rng` (``StepPolicy(..., draws=CounterDraws(...))``): keyed by the
communicator's seed and id, the context and the decision index, so every rank draws alike
and the plugin equals :class:`StepPolicy` bit for bit, chosen arms and per-arm ``n``,
``mu``, ``s2``, given the same rewards in the same order (numpy's float64 ``exp``/``log``/
``power`` being the C library's, as on x86-64 up to AVX2). The vectorised replay draws from
``numpy.random.default_rng`` instead (same rules, another source of uniforms and normals).

For a single bandit driven call by call (the C plugin's reference), use :class:`StepPolicy`.
Modules: :mod:`.families` (index and stochastic policies), :mod:`.adversarial` (loss-based
learners), :mod:`.base` (shared helpers and :class:`Policy`), :mod:`.estimators` (bandit
statistics), :mod:`.registry` (names, the ``--policies`` grammar and the hook the supervised
selectors of :mod:`..study` register with) and :mod:`.reference`
(:class:`StepPolicy`), :mod:`.counter_rng` (the plugin's shared randomness); everything is
re-exported here.
"""

from __future__ import annotations

from .adversarial import EXP3, EXP3PP, FPL, Hierarchical, TsallisINF
from .base import Policy, iqr_trimmed_mean, pick_uniform, sample_categorical
from .counter_rng import CounterDraws
from .estimators import BanditState, Estimator
from .families import (
    ETC, KLUCB, UCB1, UCBV, Auto, EpsilonGreedy, GaussianThompson, RandomPolicy, RoundRobinETC, Softmax, UCBTuned,
)
from .reference import StepPolicy
from .registry import (
    PLUGIN_POLICIES, POLICIES, STATIC_POLICY, draw_counts, expand_policy_list, live_policy_name, make_policy,
    parse_policy, register_selectors, split_policy_list,
)

__all__ = [
    "Policy", "Auto", "RandomPolicy", "UCB1", "KLUCB", "Softmax", "GaussianThompson",
    "EpsilonGreedy", "ETC", "RoundRobinETC", "UCBV", "UCBTuned", "EXP3", "EXP3PP",
    "TsallisINF", "FPL", "Hierarchical", "POLICIES", "PLUGIN_POLICIES", "STATIC_POLICY", "live_policy_name",
    "make_policy", "parse_policy", "register_selectors", "split_policy_list", "expand_policy_list",
    "draw_counts", "StepPolicy", "CounterDraws", "BanditState", "Estimator",
    "pick_uniform", "sample_categorical", "iqr_trimmed_mean",
]
