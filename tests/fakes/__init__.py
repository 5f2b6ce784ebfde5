"""Stand-ins for programs outside Tether (agent CLIs) used by end-to-end tests."""
