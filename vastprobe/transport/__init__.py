"""Ways to run the probe script on a target; each returns a TransportResult, never raises for
target trouble."""
