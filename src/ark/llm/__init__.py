"""Models behind an API: the litellm client, its cache and spending caps, the embedded model and its server."""
