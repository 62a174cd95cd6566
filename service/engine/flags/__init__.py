"""The user's command line parsed with the release's own catalog, and edits to it."""
