"""The remote probe: the script, its parameters and the framing of its output."""
