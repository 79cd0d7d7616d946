"""What reads a target's text, imported by every layer and importing nothing of vastprobe's: numbers
(ASCII digits of bounded length) and text made safe to show (escapes, markup, length)."""
