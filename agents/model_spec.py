"""What decides a model's architecture (`ModelSpec`), and `build_model`, which picks
the network of agents/networks.py for an observation shape: what the learner, the
actors, the evaluator and test mode build."""

from __future__ import annotations

import dataclasses

from agents.distributions import BOUNDED, DISTRIBUTIONS
from agents.networks import MLP, ActorCritic, MinAtarCNN, NatureCNN

# The Nature CNN's three convolutions need at least 36x36 pixels.
NATURE_MIN_SIZE = 36


def build_model(obs_shape: tuple[int, ...], num_actions: int, hidden_size: int,
                normalize_input: bool = False, normalize_returns: bool = False,
                lstm_size: int = 0, action_kind: str = "discrete",
                mlp_activation: str = "tanh", mlp_shared_torso: bool = False) -> ActorCritic:
    """The Nature CNN for [C, H, W] observations of 36x36 or more (Atari), the MinAtar
    conv net for smaller grids, the MLP (with `mlp_activation`, one torso for both heads
    with `mlp_shared_torso`) for anything flatter;
    with an LSTM core of `lstm_size` after the torso if > 0; a policy over
    `num_actions` discrete actions or, with action_kind "box", continuous dimensions."""
    args = (obs_shape, num_actions, hidden_size, normalize_input, normalize_returns,
            lstm_size, action_kind)
    if len(obs_shape) == 3:
        net = NatureCNN if min(obs_shape[1:]) >= NATURE_MIN_SIZE else MinAtarCNN
        return net(*args)
    return MLP(*args, activation=mlp_activation, shared=mlp_shared_torso)


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """Everything that decides a model's architecture: the env's observation shape,
    action count (or dimensions) and action kind (`ENV_FIELDS`, from `EnvInfo`), and
    the flags of the same names (`ARCHITECTURE_FLAGS`, fixed for a run). What the
    learner, the actors, the evaluator and test mode build."""

    obs_shape: tuple[int, ...]
    num_actions: int
    hidden_size: int
    normalize_input: bool = False
    normalize_returns: bool = False
    use_lstm: bool = False
    lstm_size: int = 0  # read only with use_lstm (0 without: equal specs, equal nets)
    action_kind: str = "discrete"  # a key of agents.distributions.DISTRIBUTIONS
    mlp_activation: str = "tanh"  # a key of MLP_ACTIVATIONS (read by the MLP only)
    mlp_shared_torso: bool = False  # one MLP torso for both heads (read by the MLP only)
    # a Box's bounds, float per dimension (the env's; read by the bounded kinds only)
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "obs_shape", tuple(self.obs_shape))
        if not self.use_lstm:
            object.__setattr__(self, "lstm_size", 0)

    @property
    def feature_size(self) -> int:
        """The width H of the hidden layer the heads read (`forward_with_hidden`)."""
        return self.lstm_size if self.use_lstm else self.hidden_size

    @property
    def state_shape(self) -> tuple[int, ...]:
        """The shape of one env's state packed by `pack_state`; () if stateless."""
        return (2, self.lstm_size) if self.use_lstm else ()

    @property
    def param_size(self) -> int:
        """P, the width of the distribution's params (the slots' "logits")."""
        return DISTRIBUTIONS[self.action_kind].param_size(self.num_actions)

    def build(self) -> ActorCritic:
        if self.action_kind in BOUNDED:  # an off-policy agent's actor
            from agents.off_policy import PolicyMLP  # noqa: PLC0415 - it builds on this module

            return PolicyMLP(self)
        return build_model(self.obs_shape, self.num_actions, self.hidden_size,
                           self.normalize_input, self.normalize_returns, self.lstm_size,
                           self.action_kind, self.mlp_activation, self.mlp_shared_torso)

    @classmethod
    def of(cls, info: dict, flags: dict) -> ModelSpec:
        """The spec for an env's `info` (`EnvInfo` as a dict, as checkpoints hold it;
        one saved before continuous actions has no action_kind: discrete) and flag
        values (name -> value; at least `ARCHITECTURE_FLAGS`)."""
        return cls(info["obs_shape"], info["num_actions"],
                   action_kind=info.get("action_kind", "discrete"),
                   action_low=tuple(info.get("action_low", ())),
                   action_high=tuple(info.get("action_high", ())),
                   **{name: flags.get(name) for name in ARCHITECTURE_FLAGS})


ENV_FIELDS = ("obs_shape", "num_actions", "action_kind", "action_low",
              "action_high")  # the env's, not flags
ARCHITECTURE_FLAGS = tuple(f.name for f in dataclasses.fields(ModelSpec)
                           if f.name not in ENV_FIELDS)
