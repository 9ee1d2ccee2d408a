"""Steps of `sparkctl up` (and later reload/down): facts -> plan -> apply, one concept per module."""
