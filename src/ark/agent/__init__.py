"""The agent: its backbones (rules, hosted, embedded), policies, prompt, the step loop, voting and records."""
