"""The registry of policies by name, and the ``--policies`` grammar of the CLI."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from ncclbot_sweep.errors import AnalysisError
from ncclbot_sweep.names import STATIC as STATIC_POLICY

from .adversarial import EXP3, EXP3PP, FPL, Hierarchical, TsallisINF
from .base import Policy
from .estimators import Estimator
from .families import (
    ETC, KLUCB, UCB1, UCBV, Auto, EpsilonGreedy, GaussianThompson, RandomPolicy, RoundRobinETC, Softmax, UCBTuned,
)

__all__ = ["POLICIES", "PLUGIN_POLICIES", "STATIC_POLICY", "make_policy", "parse_policy", "split_policy_list", "expand_policy_list",
           "draw_counts", "live_policy_name", "register_selectors"]

POLICIES: dict[str, type[Policy]] = {
    cls.name: cls
    for cls in (Auto, RandomPolicy, UCB1, KLUCB, Softmax, GaussianThompson, EpsilonGreedy, ETC,
                RoundRobinETC, UCBV, UCBTuned, EXP3, EXP3PP, TsallisINF, FPL, Hierarchical)
}
_ALIASES = {"auto": "AUTO", "random": "Random", "klucb": "KL-UCB", "kl-ucb": "KL-UCB", "ts": "GaussianTS",
            "thompson": "GaussianTS", "greedy": "eps-greedy", "epsilon-greedy": "eps-greedy",
            "rretc": "RR-ETC", "madan": "RR-ETC", "ucbv": "UCB-V", "ucb-tuned": "UCB-tuned",
            "ucbtuned": "UCB-tuned", "exp3pp": "EXP3++", "tsallis": "Tsallis-INF", "hier": "Hierarchical"}

#: The plugin's ``NCCLBOT_POLICY`` values (``plugin/src/config.c``) and the name each one shows in
#: tables and figures: the family's name here, so offline and live results spell a policy alike.
#: ``greedy`` is ``EpsilonGreedy(eps=0)``, not the eps-greedy family's default; ``static`` replays
#: a table and has no family.
PLUGIN_POLICIES: dict[str, str] = {
    "auto": Auto.name, STATIC_POLICY: STATIC_POLICY, "greedy": "greedy", "ucb1": UCB1.name, "etc": ETC.name,
    "softmax": Softmax.name, "thompson": GaussianThompson.name, "eps-greedy": EpsilonGreedy.name,
}

#: Selectors defined above the policies, by the lower-cased name before any ``+``: the factory
#: that builds one from its whole name and parameters (:func:`register_selectors`).
_SELECTORS: dict[str, Callable[..., Policy]] = {}


def register_selectors(names: Iterable[str], factory: Callable[..., Policy]) -> None:
    """Let :func:`make_policy` build ``NAME`` and ``NAME+...`` with ``factory(name, **params)``.

    The supervised selectors of :mod:`ncclbot_sweep.analysis.study.supervised` register this
    way when :mod:`ncclbot_sweep.analysis.study` is imported: the study sits above the
    policies, which never import it (architecture section 2.2).
    """
    _SELECTORS.update({name.lower(): factory for name in names})


def make_policy(name: str, **params) -> Policy:
    """Build a policy by name (case-insensitive, common aliases) with champion defaults.

    ``Linear``, ``RF`` and ``GBM`` (optionally ``+cost``) are the supervised selectors of
    :mod:`ncclbot_sweep.analysis.study.supervised`, fitted by the replay on the split's train part;
    they are known once :mod:`ncclbot_sweep.analysis.study` is imported (:func:`register_selectors`).

    ``params`` override fields; ``estimator`` may be an :class:`Estimator` or a dict of its
    fields merged into the policy's default estimator. Raises :class:`AnalysisError` on an
    unknown name or parameter.
    """
    factory = _SELECTORS.get(name.partition("+")[0].strip().lower())
    if factory is not None:
        return factory(name, **params)
    key = {k.lower(): k for k in POLICIES}.get(name.lower()) or _ALIASES.get(name.lower())
    if key is None:
        raise AnalysisError(f"policy must be one of {', '.join(POLICIES)} or a supervised selector "
                            f"(Linear, RF, GBM, each optionally +cost), but got {name!r}",
                            hint=None if _SELECTORS else "the supervised selectors are known once "
                                                        "ncclbot_sweep.analysis.study is imported")
    cls = POLICIES[key]
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = set(params) - fields
    if unknown:
        raise AnalysisError(f"{key} has no parameter {sorted(unknown)}; it takes {sorted(fields)}")
    est = params.get("estimator")
    if isinstance(est, dict):
        names = {f.name for f in dataclasses.fields(Estimator)}
        if set(est) - names:
            raise AnalysisError(f"estimator has no parameter {sorted(set(est) - names)}; it takes {sorted(names)}")
        params["estimator"] = dataclasses.replace(cls().estimator, **est)
    return cls(**params)


def live_policy_name(value: str) -> str:
    """The display name of a live run's policy (a campaign's ``policies`` item, which the job
    exports lower-cased as ``NCCLBOT_POLICY``): :data:`PLUGIN_POLICIES`' spelling, any case
    accepted; a value the plugin does not know (``stock``) is returned unchanged.

    Called wherever live runs are labelled (:mod:`..live.inputs`), the one mapping between
    the two spellings.
    """
    return PLUGIN_POLICIES.get(str(value).lower(), str(value))


def split_policy_list(text: str) -> list[str]:
    """Split ``"AUTO,UCB1[alpha=0.2;pseudo_count=0],Softmax"`` on commas outside brackets."""
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    parts.append(current.strip())
    return [p for p in parts if p]


def expand_policy_list(text: str) -> list[str]:
    """:func:`split_policy_list`, with every ``@FILE`` item replaced by the specs in that file.

    A file is YAML: a mapping with a ``policies`` list (``champions.yaml`` of ``analyze tune``)
    or a plain list of specs. Raises :class:`AnalysisError` naming the file when it is
    missing or holds no ``policies`` list.
    """
    from pathlib import Path

    import yaml

    out = []
    for item in split_policy_list(text):
        if not item.startswith("@"):
            out.append(item)
            continue
        path = Path(item[1:])
        if not path.is_file():
            raise AnalysisError(f"policy file {str(path)!r} does not exist",
                                hint="pass @DIR/champions.yaml as written by 'ncclbot-sweep analyze tune --out DIR'")
        doc = yaml.safe_load(path.read_text())
        specs = doc.get("policies") if isinstance(doc, dict) else doc
        if not isinstance(specs, list) or not all(isinstance(s, str) for s in specs):
            raise AnalysisError(f"policy file {str(path)!r} has no list of policy specs",
                                hint="write 'policies: [UCB1[alpha=0.1], ...]' or a YAML list of specs")
        out.extend(specs)
    return out


def _value(text: str):
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text.strip()


def parse_policy(spec: str) -> Policy:
    """Build a policy from ``NAME`` or ``NAME[key=value;...]`` (the CLI's ``--policies`` items).

    Keys are policy fields; ``estimator.<field>`` sets the estimator; ``label`` names the
    row in result tables, e.g. ``UCB1[estimator.kind=gain;estimator.gain=0.1;label=UCB1-gain]``.
    """
    name, _, rest = spec.strip().partition("[")
    params: dict = {}
    if rest:
        if not rest.endswith("]"):
            raise AnalysisError(f"policy spec must look like NAME[key=value;...], but got {spec!r}")
        for item in filter(None, (p.strip() for p in rest[:-1].split(";"))):
            key, eq, value = item.partition("=")
            if not eq:
                raise AnalysisError(f"policy parameter must be key=value, but got {item!r} in {spec!r}")
            key = key.strip()
            if key.startswith("estimator."):
                params.setdefault("estimator", {})[key.split(".", 1)[1]] = _value(value)
            else:
                params[key] = _value(value) if key != "label" else value.strip()
    try:
        return make_policy(name.strip(), **params)
    except TypeError as exc:
        raise AnalysisError(f"bad parameters in policy spec {spec!r}: {exc}") from exc


def draw_counts(policy: Policy, n_arms: int) -> tuple[int, int]:
    """Uniforms and normals per bandit per step, in the order the engine draws them.

    The engine draws, at every step and for every seed block, ``rng.random((rows, nu))``
    then ``rng.standard_normal((rows, nz))`` (skipping empty ones) from
    ``numpy.random.default_rng(seed)``.
    """
    return policy.draws(n_arms)


