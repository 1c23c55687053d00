"""Rollouts written by real actor processes, checked against a counting env.

Checks that across many rollouts no step is lost or repeated, that row 0 repeats
the previous rollout's last row, that terminations cut bootstrapping and
truncations do not, and that the stored behaviour logits and values (and, when
asked for, hidden features) are the policy's outputs at the observation of the
same row.
"""

from __future__ import annotations

import collections

import torch

from agents.impala import LossConfig, transition_targets
from agents.networks import step_model, unroll_start
from tests.actor_harness import actors, collect_rollouts
from tests.counting_env import end_flags, episode_length

UNROLL = 5


def collect(min_per_env: int, workers: int, envs: int, store_features: bool = False):
    return collect_rollouts(min_per_env, workers, envs, UNROLL, store_features=store_features)


def test_rollouts_are_contiguous_and_consistent():
    by_env, model = collect(20, workers=2, envs=3)
    assert len(by_env) == 6, "each of the 2 x 3 envs must have its own marker"
    for marker, rollouts in by_env.items():
        counters = []
        for k, r in enumerate(rollouts):
            if k > 0:  # row 0 repeats the previous rollout's last row, every field
                prev = rollouts[k - 1]
                for name in r:
                    assert torch.equal(r[name][0], prev[name][-1]), (marker, k, name)
            counters.extend(r["obs"][1:, 1].tolist() if k > 0 else r["obs"][:, 1].tolist())
        # global step counter: no step lost, none repeated
        assert counters == list(range(len(counters))), marker

        # the behaviour outputs belong to the observation of their own row
        for r in rollouts:
            batch = {k: v.unsqueeze(1) for k, v in r.items()}
            with torch.no_grad():
                logits, value, _ = model(batch["obs"], *unroll_start(model, batch))
            torch.testing.assert_close(r["logits"], logits[:, 0])
            torch.testing.assert_close(r["value"], value[:, 0])


def test_stored_features_are_the_hidden_layer_of_the_same_forward_pass():
    by_env, model = collect(4, workers=1, envs=2, store_features=True)
    for rollouts in by_env.values():
        for k, r in enumerate(rollouts):
            assert r["features"].dtype == torch.float16
            assert r["features"].shape == (UNROLL + 1, model.hidden_size)
            if k > 0:
                assert torch.equal(r["features"][0], rollouts[k - 1]["features"][-1])
            batch = {k: v.unsqueeze(1) for k, v in r.items()}
            with torch.no_grad():
                logits, value, hidden, _ = model.forward_with_hidden(
                    batch["obs"], *unroll_start(model, batch))
            torch.testing.assert_close(r["logits"], logits[:, 0])
            torch.testing.assert_close(r["value"], value[:, 0])
            torch.testing.assert_close(r["features"].float(), hidden[:, 0], atol=1e-3,
                                       rtol=1e-3)
            assert r["features"].abs().sum() > 0  # not the random-policy zeros


def test_episode_ends_cut_or_keep_bootstrapping():
    by_env, model = collect(30, workers=1, envs=2)
    gamma = 0.9
    cfg = LossConfig(gamma=gamma, clip_rewards=False)
    seen_term = seen_trunc = seen_both = 0
    for rollouts in by_env.values():
        for r in rollouts:
            batch = {k: v.unsqueeze(1) for k, v in r.items()}
            rewards, discounts = transition_targets(batch, cfg)
            obs = r["obs"]
            for t in range(UNROLL):
                ep, step = int(obs[t, 2]), int(obs[t, 3])
                arrived_reward = 1000.0 * ep + step + 1
                end = step + 1 == episode_length(ep)
                if not end:
                    assert not r["done"][t + 1] and not r["truncated"][t + 1]
                    assert discounts[t, 0] == gamma
                    assert rewards[t, 0] == arrived_reward
                    assert obs[t + 1, 3] == step + 1
                    continue
                # the episode ended on this transition: x_{t+1} is the next reset obs
                assert obs[t + 1, 2] == ep + 1 and obs[t + 1, 3] == 0
                assert r["reward"][t + 1] == arrived_reward
                terminated, truncated = end_flags(ep)
                if truncated and not terminated:
                    seen_trunc += 1
                    assert r["truncated"][t + 1] and not r["done"][t + 1]
                    final = torch.tensor([[obs[t, 0], obs[t, 1] + 1, ep, step + 1]])
                    with torch.no_grad():
                        v_final = step_model(model, final)[1][0]
                    torch.testing.assert_close(r["bootstrap_value"][t + 1], v_final)
                    assert discounts[t, 0] == 0.0
                    torch.testing.assert_close(rewards[t, 0], arrived_reward + gamma * v_final)
                else:  # terminated, possibly on the time limit's last step: no bootstrap
                    seen_term += 1
                    seen_both += truncated
                    assert r["done"][t + 1] and not r["truncated"][t + 1]
                    assert discounts[t, 0] == 0.0 and rewards[t, 0] == arrived_reward
    assert seen_term >= 5 and seen_trunc >= 3 and seen_both >= 1


def test_every_episode_is_reported_once():
    with actors(unroll=UNROLL, workers=1, envs=2) as h:
        episodes = []
        while len(episodes) < 16:
            for done in h.rollouts():
                h.slots.release(done.indices)
                episodes.extend(done.episodes)
    # each env plays episodes 0, 1, 2, ... in order; a return identifies its episode
    by_return = {sum(1000.0 * k + i for i in range(1, episode_length(k) + 1)): k
                 for k in range(40)}
    counts = collections.Counter()
    for ret, length in episodes:
        k = by_return[ret]
        assert length == episode_length(k)
        counts[k] += 1
    n = max(counts) + 1
    # both envs report episodes in order: every k is seen at most twice, never skipped
    assert all(counts[k] <= 2 for k in range(n))
    assert all(counts[k] >= counts[k + 1] for k in range(n - 1))
    assert counts[0] == 2 and counts[2] >= 1, "truncated episodes are games too"
