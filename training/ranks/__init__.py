"""The data-parallel learners of one policy (`--learner_count`): their process group
(group.py), their driver (driver.py), and how the ranks start: spawned by rank 0
(spawn.py) or by torchrun (torchrun.py); the ranks other than 0 (follower.py)."""
