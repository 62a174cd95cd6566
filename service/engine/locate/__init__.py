"""From the parsed log to the check that fired: frame line, function and kind, message, argparse."""
