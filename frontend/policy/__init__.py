"""Who may do what: principals, profiles and tools, command-line checks."""
