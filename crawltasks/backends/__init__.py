"""Implementations of the ports (``crawltasks.ports``): the shared ones, and ``memory``, their twins."""
