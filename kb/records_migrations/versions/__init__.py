"""The revisions, oldest first: 0001 baseline, 0002 location columns, 0003 Slack state,
0004 replay jobs."""
