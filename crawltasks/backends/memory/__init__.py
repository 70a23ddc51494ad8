"""In-memory twins of the ports, for tests of the policies in milliseconds, without services."""
