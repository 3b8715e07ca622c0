"""The smallest trading run the walk-forward integration tests train per cell (``--set`` items):
two envs, one 128-step update, 100-bar episodes — seconds per cell."""

SMALL_WALKFORWARD_SETS = [
    "env.n_envs=2",
    "ppo.n_steps=64",
    "ppo.batch_size=64",
    "total_timesteps=256",
    "env.kwargs.episode_length=100",
]
