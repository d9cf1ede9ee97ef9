"""The typed records every layer shares: a finding and its numbers and tables, and the consistency
check's bounds, measurements and verdicts. This package imports nothing of the project, so the box-side
tools, the reports and the agent can all depend on it."""
