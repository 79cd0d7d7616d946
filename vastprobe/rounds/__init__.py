"""`vastprobe watch`: one target probed round after round, and what moved between rounds."""
