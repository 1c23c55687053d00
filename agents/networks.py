"""Actor-critic networks: the Nature CNN for Atari pixels, a small conv net for
MinAtar's 10x10 grids, an MLP for vectors.

The model interface (`ActorCritic`), time-major, with a model state that a
recurrent core carries from step to step (feed-forward nets: the empty tuple):
    initial_state(B) -> state                     the state before any observation
    forward(obs [T, B, *obs_shape], state, done bool [T, B])
        -> (logits float32 [T, B, A], value float32 [T, B], new state)
where done[t] says that x_t starts a new episode (a recurrent core zeroes its state
before reading x_t; for a batch of rollouts, `unroll_start` gives both).
The same single pass can also return the last hidden layer of the policy path
(`hidden_size` = H wide), which the replays may use as features:
    forward_with_hidden(obs, state, done) -> (logits, value, hidden float32 [T, B, H],
                                              new state)
The logits are the action distribution's parameters (`agents/distributions.py`).
Pixels arrive as uint8 [T, B, C, H, W] and are scaled to [0, 1] inside the model,
so uint8 travels all the way from the emulator to the first convolution.

Every net can normalise its inputs and its value by running statistics
(`normalize_input`, `normalize_returns`; see `agents/normalize.py`): the value
head then predicts normalised values and `forward` returns them in return units.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from agents.normalize import RunningMeanStd


def orthogonal_init(model: nn.Module, policy: nn.Linear, baseline: nn.Linear) -> None:
    """Orthogonal weights and zero biases: gain sqrt(2) for the ReLU layers, 0.01 for
    the policy head (near-uniform first policy), 1 for the value head. This is the
    initialisation of OpenAI baselines, CleanRL and Sample Factory for Atari; torch's
    default (uniform, gain 1/sqrt(3) of He's) shrinks activations layer by layer."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d | nn.Linear):
            nn.init.orthogonal_(m.weight, math.sqrt(2))
            nn.init.zeros_(m.bias)
    nn.init.orthogonal_(policy.weight, 0.01)
    nn.init.orthogonal_(baseline.weight, 1.0)


State = tuple[torch.Tensor, ...]  # a model's state, each tensor [B, ...]; () if none


class ActorCritic(nn.Module):
    """The model interface (module docstring) over a net's `_flat(obs [N, ...]) ->
    (logits [N, A], value [N], hidden [N, H])`, and what the nets share: the optional
    running normalisers of inputs (`obs_norm`) and returns (`return_norm`), None
    when off. The nets here are feed-forward: their state is () and `done` is not
    read."""

    def initial_state(self, batch_size: int) -> State:
        """The state of `batch_size` envs before their first observation."""
        return ()

    def forward(self, obs: torch.Tensor, state: State, done: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, State]:
        """(logits [T, B, A], value [T, B], new state) of obs [T, B, *obs_shape]."""
        logits, value, _, state = self.forward_with_hidden(obs, state, done)
        return logits, value, state

    def forward_with_hidden(self, obs: torch.Tensor, state: State, done: torch.Tensor
                            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, State]:
        """(logits [T, B, A], value [T, B], hidden [T, B, H], new state), one pass."""
        t, b = obs.shape[:2]
        logits, value, hidden = self._flat(obs.reshape(t * b, *obs.shape[2:]))
        return logits.view(t, b, -1), value.view(t, b), hidden.view(t, b, -1), state

    def _flat(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def _normalizers(self, obs_shape: tuple[int, ...], normalize_input: bool,
                     normalize_returns: bool) -> None:
        self.obs_norm = RunningMeanStd(obs_shape) if normalize_input else None
        self.return_norm = RunningMeanStd(()) if normalize_returns else None

    def scale_input(self, obs: torch.Tensor) -> torch.Tensor:
        """obs [N, *obs_shape] as the float the net reads, before normalisation."""
        return obs.float()

    def _input(self, obs: torch.Tensor) -> torch.Tensor:
        x = self.scale_input(obs)
        return x if self.obs_norm is None else self.obs_norm.normalize(x)

    def _value(self, head: torch.Tensor) -> torch.Tensor:
        """The value head's output [N, 1] -> V [N] in return units."""
        v = head.squeeze(-1)
        return v if self.return_norm is None else self.return_norm.denormalize(v)


class NatureCNN(ActorCritic):
    """Mnih et al. (2015) torso with policy and value heads.

    Input: uint8 [.., C, H, W] (C = stacked frames). Hidden: the fc output float32
    [.., hidden_size] (after its ReLU).
    """

    def __init__(self, obs_shape: tuple[int, ...], num_actions: int, hidden_size: int = 512,
                 normalize_input: bool = False, normalize_returns: bool = False):
        super().__init__()
        self._normalizers(obs_shape, normalize_input, normalize_returns)
        c, h, w = obs_shape
        self.hidden_size = hidden_size
        self.torso = nn.Sequential(
            nn.Conv2d(c, 32, kernel_size=8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, kernel_size=4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, kernel_size=3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            n_flat = self.torso(torch.zeros(1, c, h, w)).shape[1]
        self.fc = nn.Sequential(nn.Linear(n_flat, hidden_size), nn.ReLU())
        self.policy = nn.Linear(hidden_size, num_actions)
        self.baseline = nn.Linear(hidden_size, 1)
        orthogonal_init(self, self.policy, self.baseline)

    def scale_input(self, obs: torch.Tensor) -> torch.Tensor:
        return obs.float().mul_(1.0 / 255.0)

    def _flat(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = self.fc(self.torso(self._input(obs)))
        return self.policy(h), self._value(self.baseline(h)), h


class MinAtarCNN(ActorCritic):
    """The MinAtar baseline's torso (Young & Tian, 2019): one 3x3 convolution with 16
    channels over the 10x10 grid, then a `hidden_size` fully connected layer, with
    policy and value heads.

    Input: uint8 0/1 [N, C, H, W] (C = object channels, not stacked frames), taken
    as it is. Hidden: the fc output float32 [.., hidden_size] (after its ReLU).
    """

    def __init__(self, obs_shape: tuple[int, ...], num_actions: int, hidden_size: int = 256,
                 normalize_input: bool = False, normalize_returns: bool = False):
        super().__init__()
        self._normalizers(obs_shape, normalize_input, normalize_returns)
        c, h, w = obs_shape
        self.hidden_size = hidden_size
        self.torso = nn.Sequential(
            nn.Conv2d(c, 16, kernel_size=3, stride=1), nn.ReLU(), nn.Flatten())
        n_flat = 16 * (h - 2) * (w - 2)
        self.fc = nn.Sequential(nn.Linear(n_flat, hidden_size), nn.ReLU())
        self.policy = nn.Linear(hidden_size, num_actions)
        self.baseline = nn.Linear(hidden_size, 1)
        orthogonal_init(self, self.policy, self.baseline)

    _flat = NatureCNN._flat


class MLP(ActorCritic):
    """Separate two-layer tanh torsos for the policy and the value (as CleanRL does
    for vector tasks: value gradients, of the scale of the returns, do not swamp
    the policy's features).

    Input: float32 [.., D]. Hidden: the policy torso's output float32
    [.., hidden_size] (after its tanh).
    """

    def __init__(self, obs_shape: tuple[int, ...], num_actions: int, hidden_size: int = 64,
                 normalize_input: bool = False, normalize_returns: bool = False):
        super().__init__()
        self._normalizers(obs_shape, normalize_input, normalize_returns)
        n_in = int(math.prod(obs_shape))
        self.hidden_size = hidden_size

        def torso() -> nn.Sequential:
            return nn.Sequential(
                nn.Flatten(),
                nn.Linear(n_in, hidden_size),
                nn.Tanh(),
                nn.Linear(hidden_size, hidden_size),
                nn.Tanh(),
            )

        self.policy_torso = torso()
        self.value_torso = torso()
        self.policy = nn.Linear(hidden_size, num_actions)
        self.baseline = nn.Linear(hidden_size, 1)
        nn.init.orthogonal_(self.policy.weight, gain=0.01)
        nn.init.zeros_(self.policy.bias)

    def _flat(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = self._input(obs)
        h = self.policy_torso(x)
        value = self._value(self.baseline(self.value_torso(x)))
        return self.policy(h), value, h


# The Nature CNN's three convolutions need at least 36x36 pixels.
NATURE_MIN_SIZE = 36


def build_model(obs_shape: tuple[int, ...], num_actions: int, hidden_size: int,
                normalize_input: bool = False, normalize_returns: bool = False) -> nn.Module:
    """The Nature CNN for [C, H, W] observations of 36x36 or more (Atari), the MinAtar
    conv net for smaller grids, the MLP for anything flatter."""
    if len(obs_shape) == 3:
        net = NatureCNN if min(obs_shape[1:]) >= NATURE_MIN_SIZE else MinAtarCNN
    else:
        net = MLP
    return net(obs_shape, num_actions, hidden_size, normalize_input, normalize_returns)


def unroll_start(model: ActorCritic, batch: dict[str, torch.Tensor]
                 ) -> tuple[State, torch.Tensor]:
    """What `model` needs to unroll over a batch of rollouts [T+1, B, ...] (workers/
    slots.py): the state before row 0 and done bool [T+1, B], true where x_t starts
    a new trajectory (the transition into it terminated or was truncated)."""
    return model.initial_state(batch["obs"].shape[1]), batch["done"] | batch["truncated"]


def step_model(model: ActorCritic, obs: torch.Tensor, state: State | None = None,
               starts: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, State]:
    """One time step of N envs: obs [N, *obs_shape] from `state` (default: the
    initial state), starts bool [N] (obs begins an episode; default: all) ->
    (logits [N, A], value [N], hidden [N, H], new state)."""
    n = obs.shape[0]
    if state is None:
        state = model.initial_state(n)
    if starts is None:
        starts = torch.ones(n, dtype=torch.bool, device=obs.device)
    logits, value, hidden, state = model.forward_with_hidden(obs[None], state, starts[None])
    return logits[0], value[0], hidden[0], state


@torch.no_grad()
def policy_features(model: nn.Module, obs: torch.Tensor, obs_shape: tuple[int, ...],
                    kind: str = "logits", chunk: int = 2048) -> torch.Tensor:
    """The current policy's features of obs [..., *obs_shape] (any device; computed on
    the model's, in chunks): kind "logits" -> float32 [..., A]; "hidden" -> the policy
    path's last hidden layer, float32 [..., H] (what the actors store as "features").
    What elite and attentive replays compare. Each observation is read alone, from
    the initial state."""
    if kind not in ("hidden", "logits"):
        raise ValueError(f"kind must be 'logits' or 'hidden', got {kind!r}")

    def net(x):
        logits, _, hidden, _ = step_model(model, x)
        return hidden if kind == "hidden" else logits

    device = next(model.parameters()).device
    lead = obs.shape[: obs.dim() - len(obs_shape)]
    flat = obs.reshape(-1, *obs_shape)
    out = [net(flat[i:i + chunk].to(device)).float().cpu()
           for i in range(0, flat.shape[0], chunk)]
    return torch.cat(out).reshape(*lead, -1)
