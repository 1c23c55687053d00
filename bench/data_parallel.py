"""What data-parallel learners cost, as JSON: learner updates/s and the gradient
all-reduce's share of an update, on Pong's or CartPole's net.

    python -m bench.data_parallel --net=pong --ranks=2 [--device=cpu] [--updates=6]
    python -m bench.data_parallel --net=pong --ranks=1 --device=cuda:0 --backend=nccl
    python -m bench.data_parallel --net=pong --ranks=2 --device=cuda:0   # sharing a GPU

`--ranks` processes join one `training.ranks.group.ProcessGroup` (gloo, or NCCL
with `--backend=nccl` on CUDA: one GPU per rank) and each updates the agent of the
net's default flags (Pong: ppo, T=128, 4 epochs x 4 minibatches; CartPole: impala,
T=20, one step) on a fixed synthetic batch of `--batch_size` rollouts per rank
(default: the default batch over the ranks, so the group's batch stays the
default's). After `--warmup` updates it times `--updates` more: per update the
wall seconds and the seconds spent in the flat all-reduce of the gradients
(`reduce_gradients`, every optimizer step of the update). Reported per rank
(medians over updates), then the group's updates/s (rank 0's) and frames per
second trained (group batch x T x frameskip x updates/s).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import torch
import torch.multiprocessing as mp

NETS = {"pong": dict(env="PongNoFrameskip-v4"), "cartpole": dict(env="CartPole-v1")}


def _agent_and_batch(net: str, batch_size: int | None, ranks: int, device: str):
    from option_flags import default_values
    from training.config import make_config
    from training.factory import make_agent
    from wrappers.envs import env_info

    cfg, errors = make_config(default_values(**NETS[net], device=device.split(":")[0],
                                             worker_count=1))
    assert not errors, errors
    b = batch_size or max(1, cfg.batch_size // ranks)
    cfg, errors = make_config(default_values(**NETS[net], device=device.split(":")[0],
                                             worker_count=1, batch_size=b,
                                             ppo_minibatches=min(cfg.ppo_minibatches, b)))
    assert not errors, errors
    info = env_info(cfg.env, cfg.env_options())
    torch.manual_seed(0)
    agent = make_agent(cfg, info)
    agent.model.to(device)
    agent.device = torch.device(device)
    g = torch.Generator().manual_seed(1)
    t = cfg.r_f_steps
    if info.obs_dtype == torch.uint8:
        obs = torch.randint(0, 255, (t + 1, b, *info.obs_shape), generator=g, dtype=torch.uint8)
    else:
        obs = torch.randn(t + 1, b, *info.obs_shape, generator=g)
    with torch.no_grad():
        logits, value, _ = agent.model(obs.to(device), agent.model.initial_state(b),
                                       torch.zeros(t + 1, b, dtype=torch.bool, device=device))
    logits = logits.cpu()
    batch = {"obs": obs, "action": agent.model.distribution(logits).sample(generator=g),
             "logits": logits, "value": value.cpu(), "reward": torch.randn(t + 1, b, generator=g),
             "done": torch.rand(t + 1, b, generator=g) < 0.02,
             "truncated": torch.zeros(t + 1, b, dtype=torch.bool),
             "bootstrap_value": torch.zeros(t + 1, b)}
    return cfg, info, agent, batch


def rank_main(rank: int, args, rendezvous: str, results) -> None:
    from training.ranks.group import ProcessGroup

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // args.ranks))
    cfg, info, agent, batch = _agent_and_batch(args.net, args.batch_size, args.ranks,
                                               args.device)
    group = ProcessGroup(rank, args.ranks, rendezvous, torch.device(args.device), 120.0,
                         nccl=args.backend == "nccl")
    agent.group = group
    reduce = group.reduce_gradients
    spent = [0.0]

    def timed(params):
        if agent.device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        reduce(params)
        if agent.device.type == "cuda":
            torch.cuda.synchronize()
        spent[0] += time.perf_counter() - t0
    group.reduce_gradients = timed
    update_s, reduce_s = [], []
    for k in range(args.warmup + args.updates):
        spent[0] = 0.0
        t0 = time.perf_counter()
        agent.update(batch, progress=0.0)
        if agent.device.type == "cuda":
            torch.cuda.synchronize()
        if k >= args.warmup:
            update_s.append(time.perf_counter() - t0)
            reduce_s.append(spent[0])
    params = sum(p.numel() for p in agent.model.parameters())
    group.close()
    results.put({"rank": rank, "update_s": statistics.median(update_s),
                 "allreduce_s": statistics.median(reduce_s),
                 "allreduce_share": statistics.median(
                     r / u for r, u in zip(reduce_s, update_s, strict=True)),
                 "params": params, "batch_per_rank": batch["reward"].shape[1],
                 "t": cfg.r_f_steps, "frames_per_step": info.frames_per_step})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--net", choices=sorted(NETS), default="pong")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    p.add_argument("--batch_size", type=int, default=None)
    p.add_argument("--updates", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    args = p.parse_args()
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [ctx.Process(target=rank_main, args=(r, args, f"{tmp}/rendezvous", results))
                 for r in range(args.ranks)]
        for proc in procs:
            proc.start()
        ranks = sorted((results.get(timeout=1800) for _ in procs), key=lambda r: r["rank"])
        for proc in procs:
            proc.join(30)
    first = ranks[0]
    per_s = 1.0 / first["update_s"]
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), "?")
    gpu = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else None
    print(json.dumps({
        "net": args.net, "ranks": args.ranks, "device": args.device, "backend": args.backend,
        "cpu": cpu, "cores": os.cpu_count(), "gpu": gpu, "params": first["params"],
        "batch_per_rank": first["batch_per_rank"], "group_batch": args.ranks *
        first["batch_per_rank"], "updates_per_s": round(per_s, 3),
        "frames_per_s_trained": round(per_s * args.ranks * first["batch_per_rank"] * first["t"]
                                      * first["frames_per_step"], 1),
        "allreduce_s_per_update": round(first["allreduce_s"], 6),
        "allreduce_share": round(first["allreduce_share"], 4),
        "ranks_detail": ranks}, indent=1))


if __name__ == "__main__":
    main()
