"""One module per probe source: pure functions from section text to model values."""
