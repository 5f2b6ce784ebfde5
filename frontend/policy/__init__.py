"""Who may do what: principals, profiles and tools, thread modes, command-line checks."""
