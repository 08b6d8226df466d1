"""Load-balancer drivers behind one small contract: set the canary weight, read it back."""
