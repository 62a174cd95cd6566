"""The Slack bot (:mod:`service.slack.bot`): events, thread follow-ups, Block Kit answers,
rate limits; served over HTTP or Socket Mode by :mod:`service.slack.serve`."""
