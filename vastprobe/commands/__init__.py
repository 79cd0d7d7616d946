"""The commands, one module each; options.py and checks.py hold what they share (every option
defined once, with its check), common.py the exit codes. cli.py registers them on the app."""
