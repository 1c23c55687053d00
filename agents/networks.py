"""Actor-critic networks: the Nature CNN for Atari pixels, a small conv net for
MinAtar's 10x10 grids, an MLP for vectors.

The model interface (`ActorCritic`), time-major, with a model state that a
recurrent core carries from step to step (feed-forward nets: the empty tuple):
    initial_state(B) -> state                     the state before any observation
    forward(obs [T, B, *obs_shape], state, done bool [T, B])
        -> (params float32 [T, B, P], value float32 [T, B], new state)
where done[t] says that x_t starts a new episode (a recurrent core zeroes its state
before reading x_t; for a batch of rollouts, `unroll_start` gives both).
The same single pass can also return the last hidden layer of the policy path
(`hidden_size` = H wide), which the replays may use as features:
    forward_with_hidden(obs, state, done) -> (logits, value, hidden float32 [T, B, H],
                                              new state)
The params are the action distribution's (`model.distribution`, a class of
`agents/distributions.py` picked by the env's `action_kind`): P = A logits over A
discrete actions, or the mean and log-std of A continuous dimensions (P = 2A; the
log-std is a learned parameter of its own, independent of the state, as in CleanRL
and Sample Factory). Variable names say "logits" for either.
Pixels arrive as uint8 [T, B, C, H, W] and are scaled to [0, 1] inside the model,
so uint8 travels all the way from the emulator to the first convolution.

Every net can normalise its inputs and its value by running statistics
(`normalize_input`, `normalize_returns`; see `agents/normalize.py`): the value
head then predicts normalised values and `forward` returns them in return units.
"""

from __future__ import annotations

import itertools
import math

import torch
from torch import nn

from agents.distributions import DISTRIBUTIONS
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


State = tuple[torch.Tensor, ...]  # a model's state: tensors of one shape [B, ...]; () if none


def mask_state(state: State, starts: torch.Tensor) -> State:
    """`state` with the rows of envs whose observation starts an episode (starts bool
    [B]) zeroed: the state a recurrent core reads that observation with."""
    return tuple(s * (~starts).view(-1, *(1,) * (s.dim() - 1)).to(s.dtype) for s in state)


class LSTMCore(nn.Module):
    """One LSTM layer over time (TorchBeast's `--use_lstm` core, CleanRL's init:
    orthogonal weights, zero biases). State (h, c), each float32 [B, size]; it is
    zeroed before every x_t where done[t] (`mask_state`)."""

    def __init__(self, input_size: int, size: int):
        super().__init__()
        self.size = size
        self.lstm = nn.LSTM(input_size, size)
        for name, param in self.lstm.named_parameters():
            (nn.init.zeros_ if "bias" in name else nn.init.orthogonal_)(param)

    def initial_state(self, batch_size: int) -> State:
        w = self.lstm.weight_hh_l0
        return tuple(torch.zeros(batch_size, self.size, device=w.device) for _ in range(2))

    def forward(self, x: torch.Tensor, state: State, done: torch.Tensor
                ) -> tuple[torch.Tensor, State]:
        """x [T, B, F], done bool [T, B] -> (output [T, B, size], state after x_{T-1}).
        One LSTM call per stretch of rows between episode starts: a stretch [s, e)
        begins at a row where some env starts an episode (its state is zeroed there)
        and has no start inside."""
        starts = torch.nonzero(done[1:].any(1)).flatten().add(1).tolist()
        bounds = [0, *starts, x.shape[0]]
        h, c = state
        out = []
        for s, e in itertools.pairwise(bounds):
            h, c = mask_state((h, c), done[s])
            y, (h, c) = self.lstm(x[s:e], (h[None], c[None]))
            h, c = h[0], c[0]
            out.append(y)
        return torch.cat(out), (h, c)


class ActorCritic(nn.Module):
    """The model interface (module docstring) over a net's torso `_features(x [N,
    ...]) -> [N, F]` (x already scaled and normalised), an optional recurrent `core`
    after it, and the policy and value heads on the core's output (or the torso's);
    a net with a value path of its own (the MLP) gives `_value_features`. What the
    nets also share: the optional running normalisers of inputs (`obs_norm`) and
    returns (`return_norm`), None when off. `feature_size`: the width H of the
    hidden layer the heads read (the core's size with a core)."""

    def _normalizers(self, obs_shape: tuple[int, ...], normalize_input: bool,
                     normalize_returns: bool) -> None:
        self.obs_shape = tuple(obs_shape)
        self.obs_norm = RunningMeanStd(obs_shape) if normalize_input else None
        self.return_norm = RunningMeanStd(()) if normalize_returns else None

    def _heads(self, hidden_size: int, num_actions: int, lstm_size: int,
               action_kind: str) -> None:
        """The core (lstm_size > 0) and the policy and value heads after it. The
        policy head gives A logits, or A Gaussian means next to `log_std`, a float32
        [A] parameter (0 at first: std 1)."""
        self.core = LSTMCore(hidden_size, lstm_size) if lstm_size > 0 else None
        self.feature_size = lstm_size or hidden_size
        self.distribution = DISTRIBUTIONS[action_kind]
        self.policy = nn.Linear(self.feature_size, num_actions)
        self.log_std = nn.Parameter(torch.zeros(num_actions)) if action_kind == "box" else None
        self.baseline = nn.Linear(self.feature_size, 1)

    def _policy_params(self, h: torch.Tensor) -> torch.Tensor:
        """The distribution's params [N, P] from the heads' input h [N, H]."""
        out = self.policy(h)
        if self.log_std is None:
            return out
        return torch.cat([out, self.log_std.expand_as(out)], -1)

    def initial_state(self, batch_size: int) -> State:
        """The state of `batch_size` envs before their first observation."""
        return () if self.core is None else self.core.initial_state(batch_size)

    def forward(self, obs: torch.Tensor, state: State, done: torch.Tensor,
                prepared: bool = False) -> tuple[torch.Tensor, torch.Tensor, State]:
        """(params [T, B, P], value [T, B], new state) of obs [T, B, *obs_shape], or,
        with `prepared`, of `prepare(obs)`'s float32 input."""
        logits, value, _, state = self.forward_with_hidden(obs, state, done, prepared)
        return logits, value, state

    def forward_with_hidden(self, obs: torch.Tensor, state: State, done: torch.Tensor,
                            prepared: bool = False
                            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, State]:
        """(params [T, B, P], value [T, B], hidden [T, B, H], new state), one pass;
        float32 even where autocast ran the layers in bf16 (--precision=bf16)."""
        t, b = obs.shape[:2]
        x = obs.reshape(t * b, *obs.shape[2:])
        if not prepared:
            x = self._input(x)
        h = self._features(x)
        if self.core is None:
            v = self._value_features(x, h)
        else:
            h, state = self.core(h.view(t, b, h.shape[-1]), state, done)
            h = v = h.reshape(t * b, h.shape[-1])
        # float32 out, whatever autocast computed them in (--precision=bf16)
        logits, value = self._policy_params(h).float(), self._value(self.baseline(v).float())
        h, state = h.float(), tuple(s.float() for s in state)
        # explicit widths: B may be 0 (a data-parallel rank's empty share of a minibatch)
        return (logits.view(t, b, logits.shape[-1]), value.view(t, b),
                h.view(t, b, h.shape[-1]), state)

    def _features(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _value_features(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """What the value head reads without a core: the torso's features `h`."""
        return h

    # the memory layout of the float input the torso reads (`_input`)
    input_format = torch.preserve_format
    # what `scale_input` multiplies observations by
    input_scale = 1.0

    def scale_input(self, obs: torch.Tensor,
                    memory_format: torch.memory_format = torch.preserve_format) -> torch.Tensor:
        """obs [N, *obs_shape] as the float the net reads, before normalisation
        (x `input_scale`), laid out in `memory_format`."""
        x = obs.to(torch.float32, memory_format=memory_format)
        if self.input_scale == 1.0:
            return x
        return x * self.input_scale if x is obs else x.mul_(self.input_scale)

    def _input(self, obs: torch.Tensor) -> torch.Tensor:
        """obs [N, *obs_shape] -> the float32 [N, *obs_shape] the torso reads: scaled
        and normalised, in the torso's layout (`input_format`: the CNNs' channels-last,
        so that neither the torso nor a minibatch gathered from ppo's prepared batch
        copies it again)."""
        x = self.scale_input(obs, self.input_format)
        return x if self.obs_norm is None else self.obs_norm.normalize(x)

    @torch.no_grad()
    def prepare(self, obs: torch.Tensor) -> torch.Tensor:
        """obs [..., *obs_shape] (uint8 or float32) as the float32 input the torso reads:
        scaled, and normalised by the input statistics as they are now. Element by
        element, so `forward(prepare(obs), prepared=True)` equals `forward(obs)` bit
        for bit: an update that unrolls the same observations several times (ppo's
        epochs) prepares them once, the statistics being fixed during an update."""
        lead = obs.shape[: obs.dim() - len(self.obs_shape)]
        x = self._input(obs.reshape(-1, *self.obs_shape))
        return x.view(*lead, *self.obs_shape)

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
                 normalize_input: bool = False, normalize_returns: bool = False,
                 lstm_size: int = 0, action_kind: str = "discrete"):
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
        self._heads(hidden_size, num_actions, lstm_size, action_kind)
        orthogonal_init(self, self.policy, self.baseline)

    # channels-last input: the same convolutions (Flatten reads the NCHW order),
    # 1.6x faster to train the Nature CNN on the CPU (a minibatch of 256 frames,
    # 2 threads: 140 -> 86 ms a forward and backward pass); MinAtarCNN shares it
    input_format = torch.channels_last
    input_scale = 1.0 / 255.0

    def _features(self, x: torch.Tensor) -> torch.Tensor:
        # a copy only where x did not come through `_input` (already channels-last)
        return self.fc(self.torso(x.contiguous(memory_format=torch.channels_last)))


class MinAtarCNN(ActorCritic):
    """The MinAtar baseline's torso (Young & Tian, 2019): one 3x3 convolution with 16
    channels over the 10x10 grid, then a `hidden_size` fully connected layer, with
    policy and value heads.

    Input: uint8 0/1 [N, C, H, W] (C = object channels, not stacked frames), taken
    as it is. Hidden: the fc output float32 [.., hidden_size] (after its ReLU).
    """

    def __init__(self, obs_shape: tuple[int, ...], num_actions: int, hidden_size: int = 256,
                 normalize_input: bool = False, normalize_returns: bool = False,
                 lstm_size: int = 0, action_kind: str = "discrete"):
        super().__init__()
        self._normalizers(obs_shape, normalize_input, normalize_returns)
        c, h, w = obs_shape
        self.hidden_size = hidden_size
        self.torso = nn.Sequential(
            nn.Conv2d(c, 16, kernel_size=3, stride=1), nn.ReLU(), nn.Flatten())
        n_flat = 16 * (h - 2) * (w - 2)
        self.fc = nn.Sequential(nn.Linear(n_flat, hidden_size), nn.ReLU())
        self._heads(hidden_size, num_actions, lstm_size, action_kind)
        orthogonal_init(self, self.policy, self.baseline)

    input_format = NatureCNN.input_format
    _features = NatureCNN._features


MLP_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}  # --mlp_activation


class MLP(ActorCritic):
    """Separate two-layer torsos for the policy and the value (as CleanRL does for
    vector tasks: value gradients, of the scale of the returns, do not swamp the
    policy's features), with tanh (CleanRL's) or ReLU (rl-baselines3-zoo's tuned
    MuJoCo nets) after each layer. With `shared` (`--mlp_shared_torso`) one torso that
    both heads read; with a core, one torso too: the policy's, then the core, which
    both heads read (the value must see the memory too).

    Input: float32 [.., D]. Hidden: the policy torso's output float32
    [.., hidden_size] (after its activation), or the core's.
    """

    def __init__(self, obs_shape: tuple[int, ...], num_actions: int, hidden_size: int = 64,
                 normalize_input: bool = False, normalize_returns: bool = False,
                 lstm_size: int = 0, action_kind: str = "discrete", activation: str = "tanh",
                 shared: bool = False):
        super().__init__()
        self._normalizers(obs_shape, normalize_input, normalize_returns)
        n_in = int(math.prod(obs_shape))
        self.hidden_size = hidden_size
        act = MLP_ACTIVATIONS[activation]

        def torso() -> nn.Sequential:
            return nn.Sequential(
                nn.Flatten(),
                nn.Linear(n_in, hidden_size),
                act(),
                nn.Linear(hidden_size, hidden_size),
                act(),
            )

        self.policy_torso = torso()
        self.value_torso = torso() if lstm_size == 0 and not shared else None
        self._heads(hidden_size, num_actions, lstm_size, action_kind)
        nn.init.orthogonal_(self.policy.weight, gain=0.01)
        nn.init.zeros_(self.policy.bias)

    def _features(self, x: torch.Tensor) -> torch.Tensor:
        return self.policy_torso(x)

    def _value_features(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return h if self.value_torso is None else self.value_torso(x)


def pack_state(state: State) -> torch.Tensor:
    """A non-empty state as one tensor [B, k, ...] (k = its tensors), to store."""
    return torch.stack(state, 1)


def unpack_state(packed: torch.Tensor) -> State:
    """`pack_state`'s inverse: [B, k, ...] -> k tensors [B, ...]."""
    return tuple(packed.unbind(1))


def unroll_start(model: ActorCritic, batch: dict[str, torch.Tensor]
                 ) -> tuple[State, torch.Tensor]:
    """What `model` needs to unroll over a batch of rollouts [T+1, B, ...] (workers/
    slots.py): the state it read row 0 with (the batch's "core_state" row 0; none
    for a stateless model) and done bool [T+1, B], true where x_t starts a new
    trajectory (the transition into it terminated or was truncated)."""
    state = model.initial_state(batch["done"].shape[1])
    if state:
        state = unpack_state(batch["core_state"][0])
    return state, batch["done"] | batch["truncated"]


def step_model(model: ActorCritic, obs: torch.Tensor, state: State | None = None,
               starts: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, State]:
    """One time step of N envs: obs [N, *obs_shape] from `state` (default: the
    initial state), starts bool [N] (obs begins an episode; default: all) ->
    (params [N, P], value [N], hidden [N, H], new state)."""
    n = obs.shape[0]
    if state is None:
        state = model.initial_state(n)
    if starts is None:
        starts = torch.ones(n, dtype=torch.bool, device=obs.device)
    logits, value, hidden, state = model.forward_with_hidden(obs[None], state, starts[None])
    return logits[0], value[0], hidden[0], state


@torch.no_grad()
def policy_features(model: ActorCritic, obs: torch.Tensor, state: torch.Tensor | None = None,
                    *, obs_shape: tuple[int, ...], kind: str = "logits", chunk: int = 2048
                    ) -> torch.Tensor:
    """The current policy's features of obs [..., *obs_shape] (any device; computed on
    the model's, in chunks): kind "logits" -> the params float32 [..., P]; "hidden" -> the policy
    path's last hidden layer, float32 [..., H] (what the actors store as "features").
    What elite and attentive replays compare. Each observation is read alone, in one
    step from `state` [..., *state_shape] (the stored "core_state" of its row: the
    state the actor read it with, computed by older weights) for a model with state,
    else from the initial state."""
    if kind not in ("hidden", "logits"):
        raise ValueError(f"kind must be 'logits' or 'hidden', got {kind!r}")
    device = next(model.parameters()).device
    lead = obs.shape[: obs.dim() - len(obs_shape)]
    flat = obs.reshape(-1, *obs_shape)
    states = None if state is None else state.reshape(flat.shape[0], *state.shape[len(lead):])
    out = []
    for i in range(0, flat.shape[0], chunk):
        x = flat[i:i + chunk].to(device)
        starts = torch.zeros(x.shape[0], dtype=torch.bool, device=device)
        s = None if states is None else unpack_state(states[i:i + chunk].to(device))
        logits, _, hidden, _ = step_model(model, x, s, None if s is None else starts)
        out.append((hidden if kind == "hidden" else logits).float().cpu())
    return torch.cat(out).reshape(*lead, -1)
