"""The pure core: the plan's shape (:mod:`.plan`), the state machine (:mod:`.machine`) over
the rollout's progress facts (:mod:`.progress`) and what it asks for (:mod:`.actions`), the
no-data rules (:mod:`.nodata`), load matching (:mod:`.loadmatch`), durations and the KV-cache
arithmetic (:mod:`.capacity`). No I/O, no clock, no environment: every input is an argument,
which is what lets the machine be tested over random interleavings."""
