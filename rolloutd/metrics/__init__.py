"""The metrics driver: where gate signals come from (Prometheus, a file, memory) and the
templates, batching, budget and preflight that ask them."""
