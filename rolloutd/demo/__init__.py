"""``rolloutctl demo``: a real rollout on the embedded default, against the simulated fleet."""
