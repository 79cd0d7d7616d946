"""The stage after the rules: a host's findings made into its report (the verdict the snapshot can
carry, the findings about the probe itself, incidents, headline, timeline), and a run's reports
read together (joins across hosts, the odd host out of a group). It sits above rules/ and
analysis/, whose results it assembles, and below pipeline.py, which calls it."""
