"""Facts about a host: shell probes gathered in one round trip, and parsers tested on recorded output."""
