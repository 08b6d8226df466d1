"""The statistics behind the gates, as pure functions of counts and buckets: no source, no I/O."""
