"""Tools the agent can call: Python functions, built-ins and MCP servers."""
