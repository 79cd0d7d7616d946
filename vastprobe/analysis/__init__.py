"""Primitives the rules stand on: the process tree, scope, wait chains, pipe peers, progress."""
