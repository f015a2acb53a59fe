"""Plain per-step reference implementation of the replay and every policy.

One bandit, one step at a time, Python loops over arms; numpy is used only for the
float64 transcendental functions (``log``, ``exp``, ``sqrt``, ``power``) so that both
implementations round identically. The vectorised engine must agree with this exactly.
"""

from __future__ import annotations

import math

import numpy as np

INF = math.inf


def _argmax(values, mask):
    best, arm = -INF, None
    for k, ok in enumerate(mask):
        if ok and (arm is None or values[k] > best):
            best, arm = values[k], k
    return arm


def _argmin(values, mask):
    best, arm = INF, None
    for k, ok in enumerate(mask):
        if ok and (arm is None or values[k] < best):
            best, arm = values[k], k
    return arm


def _pick_uniform(mask, u):
    ids = [k for k, ok in enumerate(mask) if ok]
    j = min(math.floor(u * len(ids)), len(ids) - 1)
    return ids[j]


def _categorical(weights, u):
    total = 0.0
    cs = []
    for w in weights:
        total = total + w
        cs.append(total)
    thr = u * total
    idx = sum(1 for c in cs if c <= thr)
    last = max(k for k, w in enumerate(weights) if w > 0)
    return min(idx, last)


def _softmax(values, mask, tau):
    top = max(values[k] for k, ok in enumerate(mask) if ok)
    return [float(np.exp((values[k] - top) / tau)) if ok else 0.0 for k, ok in enumerate(mask)]


class Bandit:
    """Statistics of one bandit; mirrors ``BanditState`` for a single row."""

    def __init__(self, policy, offered, prior, auto):
        self.p = policy
        self.est = policy.estimator
        self.offered = list(offered)
        self.prior = list(prior)
        self.auto = auto
        k = len(offered)
        self.n = [0.0] * k
        self.mu = [0.0] * k
        self.s2 = [0.0] * k
        self.pulls = [0] * k
        self.learned = [0] * k
        self.pending = [0] * k
        self.resolved = [0] * k
        self.mask = list(offered)  # offered less the held arms, set before each select
        self.peak = 1.0

    @property
    def K(self):
        return len(self.offered)

    def warm(self, nu):
        if nu <= 0:
            return
        for k in range(self.K):
            if self.offered[k] and math.isfinite(self.prior[k]):
                self.mu[k], self.n[k] = self.prior[k], float(nu)

    def var(self, k):
        if self.est.kind == "mean":
            return self.s2[k] / self.n[k] if self.n[k] > 0 else 0.0
        return self.s2[k]

    def renormalise(self, r):
        """Adaptive observed max: rescale every arm to a new running maximum, then divide by it."""
        if not self.est.observed_max:
            return r
        if r > self.peak:
            q = self.peak / r
            for a in range(self.K):
                self.mu[a] = self.mu[a] * q
                self.s2[a] = self.s2[a] * (q * q)
            self.peak = r
        return r / self.peak

    def learn(self, k, r):
        e = self.est
        n_old, mu_old, s2_old = self.n[k], self.mu[k], self.s2[k]
        n_new = e.discount * n_old + 1.0
        d = r - mu_old
        if e.kind == "mean":
            mu_new = mu_old + d / n_new
            s2_new = e.discount * s2_old + d * (r - mu_new)
        else:
            if e.kind == "sgd":
                step = e.lr * float(np.power(min(n_new, e.n_max), -e.decay))
                d = min(max(d, -e.clip), e.clip)
            else:
                step = e.gain
            if n_old == 0:
                mu_new, s2_new = r, 0.0
            else:
                mu_new, s2_new = mu_old + step * d, s2_old + step * (d * d - s2_old)
        self.n[k], self.mu[k], self.s2[k] = n_new, mu_new, s2_new
        self.learned[k] += 1

    def log_n(self):
        total = 0.0
        for value in self.n:
            total += value
        return float(np.log(max(total, 1.0)))

    def unpulled_first(self):
        for k in range(self.K):
            if self.mask[k] and self.n[k] == 0:
                return k
        return None

    def hold(self):
        """The hold rule: offered arms with pending >= probe + 2 * resolved are left out,
        unless that leaves none."""
        free = [self.offered[k] and (self.p.probe <= 0 or k == self.auto
                                     or self.pending[k] < self.p.probe + 2 * self.resolved[k]) for k in range(self.K)]
        self.mask = free if any(free) else list(self.offered)

    def gate(self, k):
        """The safety gate: AUTO's arm when ``k``'s learned mean is below (1 - margin) x AUTO's."""
        a = self.auto
        if (self.p.safety_gate and k != a and self.learned[k] >= self.p.gate_min and self.learned[a] >= 1
                and self.mu[k] < (1.0 - self.p.gate_margin) * self.mu[a]):
            return a
        return k

    def warm_losses(self, nu):
        return [nu * (1.0 - (self.prior[k] if math.isfinite(self.prior[k]) else 1.0)) if self.offered[k] else 0.0
                for k in range(self.K)]


# ----------------------------------------------------------------------------- policies

def make_reference(policy, offered, prior, auto, extra):
    """Build the reference bandit for ``policy`` (dispatch on its name)."""
    b = Bandit(policy, offered, prior, auto)
    kind = _KINDS[policy.name]
    kind.init(b, extra)
    b.kind = kind
    return b


class _Auto:
    @staticmethod
    def init(b, extra):
        pass

    @staticmethod
    def select(b, t, u, z):
        return b.auto

    @staticmethod
    def update(b, k, r):
        pass


class _Random(_Auto):
    @staticmethod
    def select(b, t, u, z):
        return _pick_uniform(b.mask, u[0])


class _MeanBased:
    @staticmethod
    def init(b, extra):
        b.warm(b.p.pseudo_count)

    @staticmethod
    def update(b, k, r):
        b.learn(k, r)


class _UCB1(_MeanBased):
    @staticmethod
    def select(b, t, u, z):
        first = b.unpulled_first()
        if first is not None:
            return first
        ln = b.log_n()
        scale = b.p.alpha * math.sqrt(2.0 * ln)
        score = [b.mu[k] + scale * (1.0 / math.sqrt(b.n[k])) if b.n[k] > 0 else INF for k in range(b.K)]
        return _argmax(score, b.mask)


class _KLUCB(_MeanBased):
    @staticmethod
    def select(b, t, u, z):
        first = b.unpulled_first()
        if first is not None:
            return first
        eps = 1e-12
        bound = b.p.c * b.log_n()
        index = []
        for k in range(b.K):
            p = min(max(b.mu[k], 0.0), 1.0)
            pc = min(max(p, eps), 1 - eps)
            lo, hi = p, 1.0
            for _ in range(b.p.iterations):
                mid = 0.5 * (lo + hi)
                qc = min(max(mid, eps), 1 - eps)
                kl = pc * float(np.log(pc / qc)) + (1 - pc) * float(np.log((1 - pc) / (1 - qc)))
                if b.n[k] * kl <= bound:
                    lo = mid
                else:
                    hi = mid
            index.append(lo)
        return _argmax(index, b.mask)


class _Softmax(_MeanBased):
    @staticmethod
    def init(b, extra):
        b.warm(b.p.pseudo_count)
        b.sel = 0.0

    @staticmethod
    def select(b, t, u, z):
        unpulled = [b.mask[k] and b.n[k] == 0 for k in range(b.K)]
        if any(unpulled):
            return _pick_uniform(unpulled, u[0])
        b.sel += 1
        tau = b.p.tau / float(np.sqrt(max(b.sel, 1.0))) if b.p.decay else b.p.tau
        return _categorical(_softmax(b.mu, b.mask, tau), u[0])


class _Thompson(_MeanBased):
    @staticmethod
    def select(b, t, u, z):
        draw = []
        for k in range(b.K):
            v = b.p.prior_var if b.n[k] < 2 else b.var(k)
            scale = float(np.sqrt(v / (b.n[k] if b.n[k] > 0 else 1.0)))
            draw.append(b.mu[k] + scale * z[k])
        return _argmax(draw, b.mask)


class _EpsGreedy(_MeanBased):
    @staticmethod
    def select(b, t, u, z):
        greedy = _argmax(b.mu, b.mask)
        if b.p.eps == 0.0:
            return greedy
        eps = b.p.eps / float(np.sqrt(t)) if b.p.decay else b.p.eps
        return _pick_uniform(b.mask, u[1]) if u[0] < eps else greedy


class _ETC(_MeanBased):
    @staticmethod
    def init(b, extra):
        b.commit = None

    @staticmethod
    def select(b, t, u, z):
        eligible = [b.offered[k] and b.learned[k] < b.p.m for k in range(b.K)]
        free = [eligible[k] and b.mask[k] for k in range(b.K)]
        if any(free):
            return _pick_uniform(free, u[0])
        if any(eligible):  # every eligible arm waits for its rewards: the best mean, no commit
            return _argmax(b.mu, b.mask)
        if b.commit is None:
            b.commit = _argmax(b.mu, b.mask)
        return b.commit if b.mask[b.commit] else _argmax(b.mu, b.mask)


def _trimmed_mean(values):
    v = sorted(values)
    if not v:
        return math.nan

    def q(p):
        pos = p * (len(v) - 1)
        lo = math.floor(pos)
        hi = min(lo + 1, len(v) - 1)
        return v[lo] + (v[hi] - v[lo]) * (pos - lo)

    q1, q3 = q(0.25), q(0.75)
    iqr = q3 - q1
    kept = [x for x in values if q1 - 1.5 * iqr <= x <= q3 + 1.5 * iqr]
    return sum(kept) / len(kept)


class _RRETC(_MeanBased):
    @staticmethod
    def init(b, extra):
        rank = extra["lex_rank"]
        b.order = sorted([k for k in range(b.K) if b.offered[k]], key=lambda k: rank[k])
        b.costs = {k: [] for k in range(b.K)}
        b.inner = 0
        b.commit = None

    @staticmethod
    def select(b, t, u, z):
        if b.inner < b.p.m * len(b.order):
            return b.order[b.inner % len(b.order)]
        if b.commit is None:
            cbar = {k: _trimmed_mean(b.costs[k]) for k in b.order}
            star = min(b.order, key=lambda k: (cbar[k], k))
            c_auto, c_star = cbar[b.auto], cbar[star]
            if c_auto > 0:
                iota = (c_auto - c_star) / c_auto
            else:
                iota = INF if c_star < c_auto else 0.0
            b.commit = b.auto if iota < b.p.gate else star
        return b.commit

    @staticmethod
    def update(b, k, r):
        b.learn(k, r)
        if b.learned[k] <= b.p.m:
            b.costs[k].append(-r)
        b.inner += 1


class _UCBV(_MeanBased):
    @staticmethod
    def select(b, t, u, z):
        first = b.unpulled_first()
        if first is not None:
            return first
        ln = b.log_n()
        zeta, c = b.p.zeta, b.p.c
        score = [b.mu[k] + float(np.sqrt(2.0 * b.var(k) * zeta * ln / b.n[k])) + c * zeta * ln / b.n[k]
                 if b.n[k] > 0 else INF for k in range(b.K)]
        return _argmax(score, b.mask)


class _UCBTuned(_MeanBased):
    @staticmethod
    def select(b, t, u, z):
        first = b.unpulled_first()
        if first is not None:
            return first
        ln = b.log_n()
        score = []
        for k in range(b.K):
            if b.n[k] == 0:
                score.append(INF)
                continue
            v = b.var(k) + float(np.sqrt(2.0 * ln / b.n[k]))
            score.append(b.mu[k] + float(np.sqrt(ln / b.n[k] * min(0.25, v))))
        return _argmax(score, b.mask)


def _loss(r, clip):
    loss = 1.0 - r
    return min(max(loss, 0.0), 1.0) if clip else loss


class _EXP3:
    @staticmethod
    def init(b, extra):
        b.L = b.warm_losses(b.p.pseudo_count)

    @staticmethod
    def select(b, t, u, z):
        w = _softmax([-b.p.eta * x for x in b.L], b.offered, 1.0)
        total = float(np.sum(np.array(w)))
        k_off = sum(b.offered)
        b.prob = [(1.0 - b.p.gamma) * w[k] / total + b.p.gamma / k_off if b.offered[k] else 0.0
                  for k in range(b.K)]
        return _categorical(b.prob, u[0])

    @staticmethod
    def update(b, k, r):
        b.learn(k, r)
        b.L[k] += _loss(r, b.p.clip_loss) / b.prob[k]


class _EXP3PP(_EXP3):
    @staticmethod
    def init(b, extra):
        b.L = [0.0] * b.K

    @staticmethod
    def select(b, t, u, z):
        k = float(sum(b.offered))
        eta = b.p.beta * float(np.sqrt(float(np.log(max(k, 2.0))) / (t * k)))
        low = min(b.L[a] for a in range(b.K) if b.offered[a])
        eps = []
        for a in range(b.K):
            gap = min(1.0, (b.L[a] - low) / t)
            xi = b.p.alpha * float(np.log(t)) ** 2 / (t * gap * gap) if gap > 0 else INF
            eps.append(min(min(1.0 / (2.0 * k), eta), xi) if b.offered[a] else 0.0)
        w = _softmax([-x for x in b.L], b.offered, 1.0 / eta)
        total = float(np.sum(np.array(w)))
        esum = float(np.sum(np.array(eps)))
        b.prob = [(1.0 - esum) * w[a] / total + eps[a] if b.offered[a] else 0.0 for a in range(b.K)]
        return _categorical(b.prob, u[0])


class _Tsallis(_EXP3):
    @staticmethod
    def select(b, t, u, z):
        eta = 2.0 * b.p.alpha / float(np.sqrt(t))
        lm = [b.L[k] if b.offered[k] else INF for k in range(b.K)]
        x = min(lm) - 2.0 / eta

        def weights(x):
            return [4.0 / (eta * (lm[k] - x)) ** 2 if b.offered[k] else 0.0 for k in range(b.K)]

        for _ in range(b.p.newton_steps):
            w = weights(x)
            s = float(np.sum(np.array(w)))
            s15 = float(np.sum(np.array(w) ** 1.5))
            x = x - (s - 1.0) / (eta * s15)
        w = weights(x)
        total = float(np.sum(np.array(w)))
        b.prob = [v / total for v in w]
        return _categorical(b.prob, u[0])

    @staticmethod
    def update(b, k, r):
        b.learn(k, r)
        loss = _loss(r, b.p.clip_loss)
        if b.p.loss_estimator == "rv":
            for a in range(b.K):
                if b.offered[a]:
                    b.L[a] += 0.5
            b.L[k] += (loss - 0.5) / b.prob[k]
        else:
            b.L[k] += loss / b.prob[k]


class _FPL(_EXP3):
    @staticmethod
    def _leader(b, u, eta):
        score = []
        for k in range(b.K):
            with np.errstate(divide="ignore"):
                f = float(np.power(-np.log(u[k]), -0.5))
            score.append(b.L[k] - f / eta)
        return _argmin(score, b.offered)

    @staticmethod
    def select(b, t, u, z):
        K = b.K
        eta = b.p.eta / float(np.sqrt(t))
        arm = _FPL._leader(b, u[:K], eta)
        b.count = b.p.resample
        for m in range(1, b.p.resample + 1):
            if _FPL._leader(b, u[m * K:(m + 1) * K], eta) == arm:
                b.count = m
                break
        return arm

    @staticmethod
    def update(b, k, r):
        b.learn(k, r)
        b.L[k] += _loss(r, b.p.clip_loss) * b.count


class _Hier(_MeanBased):
    @staticmethod
    def init(b, extra):
        b.warm(b.p.pseudo_count)
        group = list(extra["group"])
        b.groups = sorted(set(group))
        b.members = {g: [k for k in range(b.K) if group[k] == g] for g in range(max(group) + 1)}
        n_groups = max(group) + 1
        b.gmask = [any(b.offered[k] for k in b.members[g]) for g in range(n_groups)]
        b.L = []
        for g in range(n_groups):
            priors = [b.prior[k] for k in b.members[g] if b.offered[k] and math.isfinite(b.prior[k])]
            gp = max(priors) if priors else 1.0
            b.L.append(b.p.pseudo_count * (1.0 - gp) if b.gmask[g] else 0.0)
        b.sel = [0.0] * n_groups

    @staticmethod
    def select(b, t, u, z):
        w = _softmax([-b.p.parent_eta * x for x in b.L], b.gmask, 1.0)
        total = float(np.sum(np.array(w)))
        k_off = sum(b.gmask)
        b.prob = [(1.0 - b.p.parent_gamma) * w[g] / total + b.p.parent_gamma / k_off if b.gmask[g] else 0.0
                  for g in range(len(b.L))]
        g = _categorical(b.prob, u[0])
        b.g = g
        inside = [b.offered[k] and k in b.members[g] for k in range(b.K)]
        unpulled = [inside[k] and b.n[k] == 0 for k in range(b.K)]
        if any(unpulled):
            return _pick_uniform(unpulled, u[1])
        b.sel[g] += 1
        tau = b.p.tau / float(np.sqrt(max(b.sel[g], 1.0))) if b.p.decay else b.p.tau
        return _categorical(_softmax(b.mu, inside, tau), u[1])

    @staticmethod
    def update(b, k, r):
        b.learn(k, r)
        b.L[b.g] += _loss(r, False) / b.prob[b.g]


_KINDS = {
    "AUTO": _Auto, "Random": _Random, "UCB1": _UCB1, "KL-UCB": _KLUCB, "Softmax": _Softmax,
    "GaussianTS": _Thompson, "eps-greedy": _EpsGreedy, "ETC": _ETC, "RR-ETC": _RRETC, "UCB-V": _UCBV,
    "UCB-tuned": _UCBTuned, "EXP3": _EXP3, "EXP3++": _EXP3PP, "Tsallis-INF": _Tsallis, "FPL": _FPL,
    "Hierarchical": _Hier,
}


# ----------------------------------------------------------------------------- replay

def reference_draws(policy, n_ctx, n_arms, horizon, seed):
    """The engine's draw protocol, materialised: ``[T, C, nu]`` uniforms and ``[T, C, nz]`` normals."""
    nu, nz = policy.draws(n_arms)
    rng = np.random.default_rng(seed)
    us, zs = [], []
    for _ in range(horizon):
        us.append(rng.random((n_ctx, nu)) if nu else np.zeros((n_ctx, 0)))
        zs.append(rng.standard_normal((n_ctx, nz)) if nz else np.zeros((n_ctx, 0)))
    return np.stack(us), np.stack(zs)


def reference_pools(frame, *, window, keep_warmup=False):
    """Plain pools from an iterations frame: ``{(context, arm): (samples, wrap, steady)}``.

    The paper's convention written out independently of :mod:`ncclbot_sweep.analysis.pools`:
    iteration 0 dropped unless ``keep_warmup``; samples in (run, iteration) order; ``wrap`` is
    the first position inside the steady window (0 if none); ``steady`` the window mean (all
    samples if the window holds none); zero-size contexts left out.
    """
    cells = {}
    for row in frame.to_dict("records"):
        if row["iteration"] == 0 and not keep_warmup:
            continue
        if row["size_bytes"] <= 0:
            continue
        key = (row["fabric"], row["collective"], int(row["nodes"]), int(row["ranks"]), int(row["size_bytes"]))
        cells.setdefault((key, row["arm"]), []).append((str(row.get("run_id", "")), int(row["iteration"]),
                                                        float(row["time_us"])))
    out = {}
    lo, hi = window
    for cell, rows in cells.items():
        rows.sort(key=lambda r: (r[0], r[1]))
        samples = [t for _, _, t in rows]
        wrap = next((i for i, (_, it, _) in enumerate(rows) if it >= lo), 0)
        inside = [t for _, it, t in rows if lo <= it <= hi]
        steady = sum(inside) / len(inside) if inside else sum(samples) / len(samples)
        out[cell] = (samples, wrap, steady)
    return out


def served_sample(samples, wrap, pulls):
    """The sample the ``pulls``-th pull (0-based) of an arm gets: in order, then the steady part again."""
    if pulls < len(samples):
        return samples[pulls]
    return samples[wrap + (pulls - len(samples)) % (len(samples) - wrap)]


def reference_replay(problem, policy, *, horizon, seed, raw, window, keep_warmup=False, dilution=1, lag=0):
    """Replay one seed of ``policy`` on every context; returns (served, selection, arms) per context.

    Latencies come from :func:`reference_pools` of the raw frame ``raw``; the cost-model
    side (offered arms, priors, AUTO, ``mu_hat_min``) from ``problem``. With ``dilution=k`` and
    ``lag=A`` the rewards of the pulls of each block of k steps are held and applied in pull
    order A blocks after the block's last step; while some are held the hold rule applies.
    """
    pools = problem.pools
    plain = reference_pools(raw, window=window, keep_warmup=keep_warmup)
    n_ctx, n_arms, _ = pools.samples.shape
    extra = {"lex_rank": problem.lex_rank, "group": problem.group}
    draw_seed = seed if not policy.is_deterministic else 0
    us, zs = reference_draws(policy, n_ctx, n_arms, horizon, draw_seed)
    served, selection, traces = [], [], []
    for c, key in enumerate(pools.context_keys()):
        b = make_reference(policy, problem.offered[c], problem.prior[c], int(problem.auto[c]), extra)
        total, sel, trace, held = 0.0, 0.0, [], []
        for t in range(1, horizon + 1):
            if held:
                b.hold()
            k = b.gate(b.kind.select(b, t, us[t - 1, c], zs[t - 1, c]))
            b.mask = list(b.offered)
            samples, wrap, steady = plain[(key, pools.arms[k])]
            x = served_sample(samples, wrap, b.pulls[k])
            total += x
            sel += steady
            r = float(problem.mu_min[c]) / x
            held.append((((t - 1) // dilution + 1 + lag) * dilution, k, r, b.pulls[k] >= policy.estimator.skip_first))
            b.pending[k] += 1
            while held and held[0][0] <= t:
                _due, arm, reward, learn = held.pop(0)
                b.pending[arm] -= 1
                b.resolved[arm] += 1
                if learn:
                    b.kind.update(b, arm, b.renormalise(reward))
            b.pulls[k] += 1
            trace.append(k)
        served.append(total)
        selection.append(sel)
        traces.append(trace)
    return np.array(served), np.array(selection), np.array(traces)
