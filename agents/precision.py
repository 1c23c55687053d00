"""--precision: the dtype of the learner's forward and backward passes.

- fp32: everything in float32.
- bf16: the learner's matrix products and convolutions run in bfloat16 under
  `torch.autocast` (`Agent.update`); the parameters, their gradients and the
  optimizer's state stay float32, and the model's outputs (params, values, hidden
  features, state) come back as float32 (`ActorCritic.forward_with_hidden`), so the
  log-probabilities, ratios, advantages, V-trace and the losses are float32. The
  actors and the evaluator act in float32 whatever the learner uses.
- auto: float32 everywhere. bf16 is faster only where the device has it natively
  (CPUs with AVX512-BF16 or AMX, CUDA GPUs from Ampere on), and there it was to become
  auto's choice once Pong's frames to 18 with bf16 stayed within the seeds' spread:
  they did not (docs/design-notes.md, The learner's compute: Pong's seed 0 reached a
  mean-100 of 0 at 1.55M frames in float32, at 2.29M in bf16).

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
    if torch.cpu._is_amx_tile_supported():
        return "this CPU has AMX"
    if torch.cpu._is_avx512_bf16_supported():
        return "this CPU has AVX512-BF16"
    return None


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
    return None, (f"precision fp32 (--precision=auto: {native}, but bf16 slowed Pong's "
                  "learning per frame; --precision=bf16 uses it)")
