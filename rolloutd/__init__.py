"""rolloutd: progressive rollouts for self-hosted LLM inference engines."""

__version__ = "0.1.0"
