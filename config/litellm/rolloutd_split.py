"""The file LiteLLM's config loads: rolloutd's session-split plugin for this proxy.

LiteLLM resolves ``callbacks: [rolloutd_split.session_split]`` to this file beside the
config; the plugin itself ships in the rolloutd package (same version as the daemon), so
rolloutd must be importable by the proxy's Python. It reads the weights files in
``$ROLLOUTD_LITELLM_WEIGHTS_DIR`` (default /var/lib/rolloutd/litellm).
"""

from rolloutd.routers.litellm_plugin import SessionSplit

session_split = SessionSplit.from_environment()
