"""Reading a crash log: frames, exception, argparse error, command, environment, hints."""
