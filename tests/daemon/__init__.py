"""Multi-process tests: real ``rolloutd run`` processes against a real database."""
