"""The kube-scheduler extender: score nodes so that pods land where their bitstream is already loaded.

Only ``server`` imports aiohttp (wired by ``agent.cluster.extenderservice``): the agent, which reads the
extender's options from here, never loads it. See docs/scoring.md."""
