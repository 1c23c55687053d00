"""Tests for ``agents.vtrace`` against an independent float64 NumPy reference.

The reference (:func:`reference_vtrace`) is written directly from the explicit double sum of
IMPALA (Espeholt et al. 2018, eq. 1) rather than from the backward recursion that efficient
implementations use, so it is an independent check of the recursion:

    rho_s    = min(rho_bar, pi/mu)                (clip_rho_threshold)
    c_s      = min(c_bar, pi/mu)                  (clip_c_threshold)
    rho_pg_s = min(clip_pg_rho_threshold, pi/mu)
    delta_s  = rho_s * (r_s + gamma_s * V(x_{s+1}) - V(x_s)),       V(x_T) = bootstrap_value
    v_s      = V(x_s) + sum_{t=s}^{T-1} [prod_{i=s}^{t-1} gamma_i * c_i] * delta_t
    pg_adv_s = rho_pg_s * (r_s + gamma_s * v_{s+1} - V(x_s)),          v_T = bootstrap_value

with ``gamma_s = discounts[s]`` (per-step discounts, so a zero discount marks an episode end)
and a threshold of ``None`` meaning "no clipping". Everything is time-major: ``[T, B]``.

The implementation runs in float32 while the reference runs in float64, hence the tolerances.
"""

import numpy as np
import pytest
import torch
from scipy import stats

from agents import vtrace
from agents.distributions import DiagGaussian

RTOL = 1e-5
ATOL = 1e-5
THRESHOLDS = [0.5, 1.0, 2.0, None]


# --------------------------------------------------------------------------------------------
# Reference implementation (float64, explicit double sum).
# --------------------------------------------------------------------------------------------
def _clip(x, threshold):
    return x if threshold is None else np.minimum(threshold, x)


def reference_vtrace(
    log_rhos,
    discounts,
    rewards,
    values,
    bootstrap_value,
    clip_rho_threshold=1.0,
    clip_pg_rho_threshold=1.0,
    clip_c_threshold=1.0,
):
    """Return ``(vs, pg_advantages)`` as float64 arrays of shape ``[T, B]``."""
    log_rhos = np.asarray(log_rhos, dtype=np.float64)
    discounts = np.asarray(discounts, dtype=np.float64)
    rewards = np.asarray(rewards, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    bootstrap_value = np.asarray(bootstrap_value, dtype=np.float64)
    num_steps = log_rhos.shape[0]

    rhos = np.exp(log_rhos)
    clipped_rhos = _clip(rhos, clip_rho_threshold)
    cs = _clip(rhos, clip_c_threshold)
    clipped_pg_rhos = _clip(rhos, clip_pg_rho_threshold)

    # V(x_0), ..., V(x_{T-1}), V(x_T) = bootstrap_value.
    values_ext = np.concatenate([values, bootstrap_value[None]], axis=0)
    deltas = clipped_rhos * (rewards + discounts * values_ext[1:] - values_ext[:-1])

    vs = np.empty_like(values)
    for s in range(num_steps):
        total = np.zeros_like(bootstrap_value)
        for t in range(s, num_steps):
            # prod over the empty range i in [s, s) is 1.
            coef = np.prod(discounts[s:t] * cs[s:t], axis=0)
            total = total + coef * deltas[t]
        vs[s] = values[s] + total

    vs_ext = np.concatenate([vs, bootstrap_value[None]], axis=0)
    pg_advantages = clipped_pg_rhos * (rewards + discounts * vs_ext[1:] - values)
    return vs, pg_advantages


def nstep_returns(rewards, bootstrap_value, gamma):
    """sum_{t=s}^{T-1} gamma^{t-s} r_t + gamma^{T-s} bootstrap, via a plain forward loop."""
    rewards = np.asarray(rewards, dtype=np.float64)
    bootstrap_value = np.asarray(bootstrap_value, dtype=np.float64)
    num_steps = rewards.shape[0]
    out = np.empty_like(rewards)
    for s in range(num_steps):
        ret = np.zeros_like(bootstrap_value)
        for t in range(s, num_steps):
            ret = ret + gamma ** (t - s) * rewards[t]
        out[s] = ret + gamma ** (num_steps - s) * bootstrap_value
    return out


def np_log_softmax(logits):
    logits = np.asarray(logits, dtype=np.float64)
    m = logits.max(axis=-1, keepdims=True)
    return logits - m - np.log(np.exp(logits - m).sum(axis=-1, keepdims=True))


# --------------------------------------------------------------------------------------------
# Helpers.
# --------------------------------------------------------------------------------------------
def make_inputs(rng, T, B, log_rho_scale=1.0, discount_mode="uniform"):
    log_rhos = log_rho_scale * rng.standard_normal((T, B))
    rewards = rng.standard_normal((T, B))
    values = rng.standard_normal((T, B))
    bootstrap_value = rng.standard_normal(B)
    if discount_mode == "uniform":
        discounts = rng.uniform(0.0, 1.0, size=(T, B))
    elif discount_mode == "high":
        discounts = rng.uniform(0.9, 1.0, size=(T, B))
    elif discount_mode == "dones":
        discounts = np.full((T, B), 0.99)
        discounts[rng.random((T, B)) < 0.2] = 0.0
        if T > 2:
            # Guarantee at least one episode end in the interior of every column.
            discounts[rng.integers(0, T - 1, size=B), np.arange(B)] = 0.0
    else:
        raise ValueError(discount_mode)
    arrays = dict(
        log_rhos=log_rhos,
        discounts=discounts,
        rewards=rewards,
        values=values,
        bootstrap_value=bootstrap_value,
    )
    return {k: v.astype(np.float32) for k, v in arrays.items()}


def to_torch(arrays):
    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}


def run_impl(arrays, **clip_kwargs):
    return vtrace.from_importance_weights(**to_torch(arrays), **clip_kwargs)


def assert_close(actual, expected, rtol=RTOL, atol=ATOL):
    actual = actual.detach().cpu().numpy() if isinstance(actual, torch.Tensor) else actual
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


# --------------------------------------------------------------------------------------------
# Sanity checks of the reference itself (cheap, guard against a broken oracle).
# --------------------------------------------------------------------------------------------
def test_reference_hand_computed_two_steps():
    # T=2, B=1, no clipping binding except as written.
    log_rhos = np.log(np.array([[0.5], [3.0]]))
    discounts = np.array([[0.9], [0.8]])
    rewards = np.array([[1.0], [2.0]])
    values = np.array([[0.5], [-1.0]])
    bootstrap = np.array([4.0])
    vs, pg = reference_vtrace(log_rhos, discounts, rewards, values, bootstrap, 1.0, 1.0, 1.0)
    # rho = c = [0.5, 1.0]
    d0 = 0.5 * (1.0 + 0.9 * -1.0 - 0.5)  # -0.2
    d1 = 1.0 * (2.0 + 0.8 * 4.0 - -1.0)  # 6.2
    v1 = -1.0 + d1
    v0 = 0.5 + d0 + 0.9 * 0.5 * d1
    np.testing.assert_allclose(vs[:, 0], [v0, v1])
    np.testing.assert_allclose(pg[:, 0], [0.5 * (1.0 + 0.9 * v1 - 0.5), 2.0 + 0.8 * 4.0 + 1.0])


def test_reference_matches_nstep_return_on_policy():
    rng = np.random.default_rng(0)
    a = make_inputs(rng, 7, 3, discount_mode="high")
    gamma = 0.95
    vs, _ = reference_vtrace(
        np.zeros((7, 3)), np.full((7, 3), gamma), a["rewards"], a["values"],
        a["bootstrap_value"], None, None, None,
    )  # fmt: skip
    np.testing.assert_allclose(vs, nstep_returns(a["rewards"], a["bootstrap_value"], gamma))


# --------------------------------------------------------------------------------------------
# from_importance_weights.
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("T", [1, 20])
@pytest.mark.parametrize("B", [1, 5])
@pytest.mark.parametrize("clip_rho", THRESHOLDS)
@pytest.mark.parametrize("clip_c", THRESHOLDS)
def test_from_importance_weights_rho_c_grid(T, B, clip_rho, clip_c):
    seed = (T, B, THRESHOLDS.index(clip_rho), THRESHOLDS.index(clip_c))
    rng = np.random.default_rng(seed)
    a = make_inputs(rng, T, B, log_rho_scale=1.0, discount_mode="uniform")
    clips = dict(clip_rho_threshold=clip_rho, clip_pg_rho_threshold=1.0, clip_c_threshold=clip_c)
    out = run_impl(a, **clips)
    vs_ref, pg_ref = reference_vtrace(**a, **clips)
    assert_close(out.vs, vs_ref)
    assert_close(out.pg_advantages, pg_ref)


@pytest.mark.parametrize("T", [1, 20])
@pytest.mark.parametrize("B", [1, 5])
@pytest.mark.parametrize("clip_pg_rho", THRESHOLDS)
@pytest.mark.parametrize("clip_rho_c", [(1.0, 1.0), (2.0, 0.5), (None, None)])
def test_from_importance_weights_pg_rho(T, B, clip_pg_rho, clip_rho_c):
    clip_rho, clip_c = clip_rho_c
    rng = np.random.default_rng(1000 + 10 * T + B)
    a = make_inputs(rng, T, B, log_rho_scale=1.0, discount_mode="high")
    clips = dict(
        clip_rho_threshold=clip_rho, clip_pg_rho_threshold=clip_pg_rho, clip_c_threshold=clip_c
    )
    out = run_impl(a, **clips)
    vs_ref, pg_ref = reference_vtrace(**a, **clips)
    assert_close(out.vs, vs_ref)
    assert_close(out.pg_advantages, pg_ref)


def test_from_importance_weights_default_thresholds_are_one():
    rng = np.random.default_rng(7)
    a = make_inputs(rng, 20, 5)
    out = run_impl(a)
    vs_ref, pg_ref = reference_vtrace(**a, clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0,
                                      clip_c_threshold=1.0)  # fmt: skip
    assert_close(out.vs, vs_ref)
    assert_close(out.pg_advantages, pg_ref)


def test_rho_and_c_clipping_are_independent():
    """Swapping rho_bar and c_bar must change the result (each threshold is used where due)."""
    rng = np.random.default_rng(11)
    a = make_inputs(rng, 20, 5, discount_mode="high")
    out_a = run_impl(a, clip_rho_threshold=0.5, clip_c_threshold=2.0)
    out_b = run_impl(a, clip_rho_threshold=2.0, clip_c_threshold=0.5)
    assert not np.allclose(out_a.vs.numpy(), out_b.vs.numpy(), rtol=1e-3, atol=1e-3)
    for out, (rho_bar, c_bar) in ((out_a, (0.5, 2.0)), (out_b, (2.0, 0.5))):
        vs_ref, pg_ref = reference_vtrace(**a, clip_rho_threshold=rho_bar, clip_c_threshold=c_bar)
        assert_close(out.vs, vs_ref)
        assert_close(out.pg_advantages, pg_ref)


@pytest.mark.parametrize("T", [1, 20])
@pytest.mark.parametrize("B", [1, 5])
@pytest.mark.parametrize("clips", [(1.0, 1.0, 1.0), (0.5, 2.0, 1.0), (2.0, 0.5, 0.5),
                                   (None, None, None)])  # fmt: skip
def test_from_importance_weights_with_episode_ends(T, B, clips):
    clip_rho, clip_pg_rho, clip_c = clips
    rng = np.random.default_rng(2000 + 10 * T + B)
    a = make_inputs(rng, T, B, log_rho_scale=0.7, discount_mode="dones")
    kw = dict(
        clip_rho_threshold=clip_rho, clip_pg_rho_threshold=clip_pg_rho, clip_c_threshold=clip_c
    )
    out = run_impl(a, **kw)
    vs_ref, pg_ref = reference_vtrace(**a, **kw)
    assert_close(out.vs, vs_ref)
    assert_close(out.pg_advantages, pg_ref)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("clips", [(1.0, 1.0, 1.0), (None, None, None)])
def test_zero_discount_blocks_backward_leakage(seed, clips):
    """After an episode end (discount 0 at step k), nothing from steps > k nor the bootstrap
    value may influence vs[:k+1] or pg_advantages[:k+1]."""
    clip_rho, clip_pg_rho, clip_c = clips
    kw = dict(
        clip_rho_threshold=clip_rho, clip_pg_rho_threshold=clip_pg_rho, clip_c_threshold=clip_c
    )
    T, B = 20, 5
    rng = np.random.default_rng(3000 + seed)
    a = make_inputs(rng, T, B, log_rho_scale=0.7, discount_mode="dones")
    base = run_impl(a, **kw)

    # First episode end in each column.
    cut = np.array([np.flatnonzero(a["discounts"][:, b] == 0.0)[0] for b in range(B)])
    after = np.arange(T)[:, None] > cut[None, :]  # [T, B] mask of steps strictly after the cut
    assert after.any()

    p = {k: v.copy() for k, v in a.items()}
    n = int(after.sum())
    p["rewards"][after] += (10.0 + rng.standard_normal(n)).astype(np.float32)
    p["values"][after] -= (5.0 + rng.standard_normal(n)).astype(np.float32)
    p["log_rhos"][after] += rng.standard_normal(n).astype(np.float32)
    p["discounts"][after] = rng.uniform(0.5, 1.0, n).astype(np.float32)
    p["bootstrap_value"] = p["bootstrap_value"] + 100.0
    pert = run_impl(p, **kw)

    before = ~after
    np.testing.assert_allclose(pert.vs.numpy()[before], base.vs.numpy()[before], rtol=1e-6,
                               atol=1e-6)  # fmt: skip
    np.testing.assert_allclose(pert.pg_advantages.numpy()[before],
                               base.pg_advantages.numpy()[before], rtol=1e-6,
                               atol=1e-6)  # fmt: skip
    # The perturbation is not a no-op where it is allowed to matter.
    assert not np.allclose(pert.vs.numpy()[after], base.vs.numpy()[after])

    # Both runs still agree with the reference.
    for arrays, out in ((a, base), (p, pert)):
        vs_ref, pg_ref = reference_vtrace(**arrays, **kw)
        assert_close(out.vs, vs_ref)
        assert_close(out.pg_advantages, pg_ref)


def test_single_step_closed_form():
    """T=1: vs = V + rho (r + g*boot - V), pg = rho_pg (r + g*boot - V)."""
    log_rhos = torch.log(torch.tensor([[0.25, 1.5, 4.0]]))
    discounts = torch.tensor([[0.9, 0.0, 0.5]])
    rewards = torch.tensor([[1.0, -2.0, 0.5]])
    values = torch.tensor([[0.3, 0.7, -1.0]])
    boot = torch.tensor([2.0, 5.0, -3.0])
    out = vtrace.from_importance_weights(
        log_rhos, discounts, rewards, values, boot,
        clip_rho_threshold=1.0, clip_pg_rho_threshold=2.0, clip_c_threshold=0.1,
    )  # fmt: skip
    td = rewards + discounts * boot - values
    rho = torch.tensor([[0.25, 1.0, 1.0]])
    rho_pg = torch.tensor([[0.25, 1.5, 2.0]])
    torch.testing.assert_close(out.vs, values + rho * td)
    torch.testing.assert_close(out.pg_advantages, rho_pg * td)


# --------------------------------------------------------------------------------------------
# On-policy sanity: V-trace reduces to the n-step bootstrapped return.
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("T,B", [(1, 1), (5, 3), (20, 5)])
@pytest.mark.parametrize("gamma", [0.0, 0.9, 0.99, 1.0])
@pytest.mark.parametrize("clips", [(1.0, 1.0, 1.0), (2.0, 2.0, 2.0), (None, None, None)])
def test_on_policy_equals_nstep_return(T, B, gamma, clips):
    clip_rho, clip_pg_rho, clip_c = clips
    rng = np.random.default_rng(4000 + T + B)
    a = make_inputs(rng, T, B)
    a["log_rhos"] = np.zeros((T, B), dtype=np.float32)
    a["discounts"] = np.full((T, B), gamma, dtype=np.float32)
    out = run_impl(
        a, clip_rho_threshold=clip_rho, clip_pg_rho_threshold=clip_pg_rho, clip_c_threshold=clip_c
    )
    expected = nstep_returns(a["rewards"], a["bootstrap_value"], gamma)
    assert_close(out.vs, expected)
    # On-policy, pg_advantage_s = r_s + gamma v_{s+1} - V(x_s) = v_s - V(x_s).
    assert_close(out.pg_advantages, expected - a["values"].astype(np.float64))


# --------------------------------------------------------------------------------------------
# from_logits.
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("T,B,A", [(1, 1, 2), (20, 5, 6), (7, 3, 18)])
@pytest.mark.parametrize("clips", [(1.0, 1.0, 1.0), (0.5, 2.0, 1.0), (None, None, None)])
def test_from_logits(T, B, A, clips):
    clip_rho, clip_pg_rho, clip_c = clips
    kw = dict(
        clip_rho_threshold=clip_rho, clip_pg_rho_threshold=clip_pg_rho, clip_c_threshold=clip_c
    )
    rng = np.random.default_rng(5000 + T * 100 + B * 10 + A)
    behaviour_logits = (1.5 * rng.standard_normal((T, B, A))).astype(np.float32)
    target_logits = (1.5 * rng.standard_normal((T, B, A))).astype(np.float32)
    actions = rng.integers(0, A, size=(T, B)).astype(np.int64)
    a = make_inputs(rng, T, B, discount_mode="high")

    out = vtrace.from_logits(
        behaviour_policy_logits=torch.from_numpy(behaviour_logits),
        target_policy_logits=torch.from_numpy(target_logits),
        actions=torch.from_numpy(actions),
        discounts=torch.from_numpy(a["discounts"]),
        rewards=torch.from_numpy(a["rewards"]),
        values=torch.from_numpy(a["values"]),
        bootstrap_value=torch.from_numpy(a["bootstrap_value"]),
        **kw,
    )
    assert isinstance(out, vtrace.VTraceFromLogitsReturns)

    tb, bb = np.meshgrid(np.arange(T), np.arange(B), indexing="ij")
    target_lp = np_log_softmax(target_logits)[tb, bb, actions]
    behaviour_lp = np_log_softmax(behaviour_logits)[tb, bb, actions]
    log_rhos = target_lp - behaviour_lp

    assert_close(out.target_action_log_probs, target_lp)
    assert_close(out.behaviour_action_log_probs, behaviour_lp)
    assert_close(out.log_rhos, log_rhos)

    vs_ref, pg_ref = reference_vtrace(
        log_rhos, a["discounts"], a["rewards"], a["values"], a["bootstrap_value"], **kw
    )
    assert_close(out.vs, vs_ref)
    assert_close(out.pg_advantages, pg_ref)

    for name in ("vs", "pg_advantages", "log_rhos", "behaviour_action_log_probs",
                 "target_action_log_probs"):  # fmt: skip
        t = getattr(out, name)
        assert t.shape == (T, B), name
        assert t.dtype == torch.float32, name


@pytest.mark.parametrize("T,B,A", [(1, 1, 1), (9, 4, 3)])
def test_from_logits_with_gaussian_actions(T, B, A):
    """Continuous actions: the log-probs are sums of Gaussian log-densities over the A
    dimensions (SciPy), and the targets V-trace's of their ratios."""
    rng = np.random.default_rng(7000 + T * 10 + A)

    def params():
        return np.concatenate([rng.standard_normal((T, B, A)),
                               0.5 * rng.standard_normal((T, B, A))], -1).astype(np.float32)

    behaviour, target = params(), params()
    actions = (2.0 * rng.standard_normal((T, B, A))).astype(np.float32)
    a = make_inputs(rng, T, B, discount_mode="high")
    out = vtrace.from_logits(
        behaviour_policy_logits=torch.from_numpy(behaviour),
        target_policy_logits=torch.from_numpy(target),
        actions=torch.from_numpy(actions), distribution=DiagGaussian,
        **{k: torch.from_numpy(a[k]) for k in ("discounts", "rewards", "values",
                                               "bootstrap_value")})

    def log_prob(p):
        mean, log_std = np.split(p.astype(np.float64), 2, -1)
        return stats.norm.logpdf(actions, mean, np.exp(log_std)).sum(-1)

    log_rhos = log_prob(target) - log_prob(behaviour)
    assert_close(out.target_action_log_probs, log_prob(target))
    assert_close(out.log_rhos, log_rhos)
    vs_ref, pg_ref = reference_vtrace(log_rhos, a["discounts"], a["rewards"], a["values"],
                                      a["bootstrap_value"])
    assert_close(out.vs, vs_ref)
    assert_close(out.pg_advantages, pg_ref)


def test_from_logits_positional_defaults_match_from_importance_weights():
    rng = np.random.default_rng(6)
    T, B, A = 10, 4, 5
    beh = torch.from_numpy(rng.standard_normal((T, B, A)).astype(np.float32))
    tgt = torch.from_numpy(rng.standard_normal((T, B, A)).astype(np.float32))
    actions = torch.from_numpy(rng.integers(0, A, size=(T, B)))
    a = to_torch(make_inputs(rng, T, B))
    out = vtrace.from_logits(
        beh, tgt, actions, a["discounts"], a["rewards"], a["values"], a["bootstrap_value"]
    )
    iw = vtrace.from_importance_weights(
        out.log_rhos, a["discounts"], a["rewards"], a["values"], a["bootstrap_value"]
    )
    torch.testing.assert_close(out.vs, iw.vs)
    torch.testing.assert_close(out.pg_advantages, iw.pg_advantages)


# --------------------------------------------------------------------------------------------
# Gradients, dtypes, shapes, return types.
# --------------------------------------------------------------------------------------------
def test_from_importance_weights_outputs_carry_no_gradient():
    rng = np.random.default_rng(8)
    t = to_torch(make_inputs(rng, 20, 5))
    t = {k: v.clone().requires_grad_(True) for k, v in t.items()}
    out = vtrace.from_importance_weights(**t)
    assert not out.vs.requires_grad
    assert not out.pg_advantages.requires_grad
    assert out.vs.grad_fn is None
    assert out.pg_advantages.grad_fn is None


def test_from_logits_vtrace_outputs_carry_no_gradient():
    rng = np.random.default_rng(9)
    T, B, A = 20, 5, 4
    beh = torch.randn(T, B, A, generator=torch.Generator().manual_seed(0), requires_grad=True)
    tgt = torch.randn(T, B, A, generator=torch.Generator().manual_seed(1), requires_grad=True)
    actions = torch.from_numpy(rng.integers(0, A, size=(T, B)))
    t = to_torch(make_inputs(rng, T, B))
    values = t["values"].clone().requires_grad_(True)
    boot = t["bootstrap_value"].clone().requires_grad_(True)
    out = vtrace.from_logits(beh, tgt, actions, t["discounts"], t["rewards"], values, boot)
    assert not out.vs.requires_grad
    assert not out.pg_advantages.requires_grad


def test_inputs_are_not_modified():
    rng = np.random.default_rng(10)
    a = make_inputs(rng, 20, 5, discount_mode="dones")
    t = to_torch({k: v.copy() for k, v in a.items()})
    vtrace.from_importance_weights(**t, clip_rho_threshold=0.5, clip_c_threshold=0.5)
    for k, v in a.items():
        np.testing.assert_array_equal(t[k].numpy(), v, err_msg=k)


@pytest.mark.parametrize("T,B", [(1, 1), (1, 5), (20, 1), (20, 5)])
def test_from_importance_weights_dtype_shape_and_type(T, B):
    rng = np.random.default_rng(12)
    out = run_impl(make_inputs(rng, T, B))
    assert isinstance(out, vtrace.VTraceReturns)
    for name in ("vs", "pg_advantages"):
        t = getattr(out, name)
        assert isinstance(t, torch.Tensor), name
        assert t.shape == (T, B), name
        assert t.dtype == torch.float32, name
        assert torch.isfinite(t).all(), name


def test_namedtuple_fields():
    assert vtrace.VTraceReturns._fields == ("vs", "pg_advantages")
    assert vtrace.VTraceFromLogitsReturns._fields == (
        "vs",
        "pg_advantages",
        "log_rhos",
        "behaviour_action_log_probs",
        "target_action_log_probs",
    )
