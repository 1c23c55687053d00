"""What the forkserver of the actor and evaluator processes imports before it forks
them (training/factory.py `worker_context`): their modules (torch, the envs), once.

Then it freezes what the imports made out of Python's garbage collector (`gc.freeze`,
as its docs advise before forking): a worker's full collections skip the 280k
objects it shares with the server (0.15 s each, and each would touch, so copy, the
shared pages), and the server's own exit leaves them to the OS instead of collecting
them (0.55 s of the 0.8 s such an exit took, measured).

The env modules a run needs besides (`wrappers.envs.env_modules`: MinAtar's package,
1.2 s to import) come before this one in the preload list, so they are frozen too.
"""

import gc

import workers.actor  # noqa: F401
import workers.evaluator  # noqa: F401

gc.freeze()
