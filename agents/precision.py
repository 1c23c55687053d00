"""--precision: the dtype of the learner's forward and backward passes.

- fp32: everything in float32.
- bf16: the learner's matrix products and convolutions run in bfloat16 under
  `torch.autocast` (`Agent.update`); the parameters, their gradients and the
  optimizer's state stay float32, and the model's outputs (params, values, hidden
  features, state) come back as float32 (`ActorCritic.forward_with_hidden`), so the
  log-probabilities, ratios, advantages, V-trace and the losses are float32. The
  actors and the evaluator act in float32 whatever the learner uses.
- auto: float32 everywhere. bf16 runs Pong's ppo learner step faster on a CPU with
  AMX but learned slower per frame: its rounding loses the policy's share of the
  shared torso's gradient while the policy head is small, and its updates moved the
  policy less (docs/design-notes.md, "The learner's compute: float32 or bf16?"). On
  GPUs an update was slower in bf16 at these sizes, and on MLPs bf16 is slower.
  `--precision=bf16` is there for a faster learner at that cost.

The off-policy agents (sac, td3, ddpg: small MLPs on vectors, nothing for bf16 to
speed up) train in float32 only.
"""

from __future__ import annotations

import torch

PRECISIONS = ("auto", "fp32", "bf16")

def native_bf16(device: torch.device) -> str | None:
    """Why `device` computes in bf16 natively, or None where it does not (PyTorch then
    emulates bf16 through float32, slower than float32 itself)."""
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported(including_emulation=False):
            return f"{torch.cuda.get_device_name(device)} has bf16"
        return None
    if has_amx(device):
        return "this CPU has AMX"
    if torch.cpu._is_avx512_bf16_supported():
        return "this CPU has AVX512-BF16"
    return None


def has_amx(device: torch.device) -> bool:
    """Whether `device` is a CPU with AMX, bf16 matrix tiles (Intel Xeon from Sapphire
    Rapids on)."""
    return device.type == "cpu" and torch.cpu._is_amx_tile_supported()


def choose_precision(requested: str, device: torch.device, off_policy: bool
                     ) -> tuple[torch.dtype | None, str]:
    """(the autocast dtype, None for float32; a sentence saying what was chosen and
    why) for `--precision=requested` on `device`. `requested` must be one of
    PRECISIONS and bf16 must not be asked of an off-policy agent (the config checks
    both)."""
    if off_policy:
        return None, "precision fp32 (the off-policy agents train in float32)"
    native = native_bf16(device)
    if requested == "fp32":
        return None, "precision fp32 (--precision=fp32)"
    if requested == "bf16":
        how = native or f"emulated on this {device.type}: likely slower than fp32"
        return torch.bfloat16, f"precision bf16 (--precision=bf16; {how})"
    if native is None:
        return None, f"precision fp32 (--precision=auto: no native bf16 on this {device.type})"
    if device.type == "cuda":
        return None, (f"precision fp32 (--precision=auto: {native}, but a GPU's update was "
                      "slower in bf16 at these sizes; --precision=bf16 uses it)")
    return None, (f"precision fp32 (--precision=auto: {native}, but ppo learned Pong slower "
                  "per frame in bf16; --precision=bf16 uses it)")
