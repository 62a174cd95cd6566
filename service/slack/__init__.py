"""The Slack bot: events, thread follow-ups, Block Kit answers, rate limits."""
